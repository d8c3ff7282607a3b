"""Push configs as the A2A endpoint keeps them, and the error of a database away.

:class:`PushConfigs` stores each push config a caller sets as a route of kind ``a2a``
(its URL checked against the push egress policy, the host's addresses looked up now) and
reads a task's configs back from its mail's reply addresses, never their credentials.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import structlog
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import A2AError, InternalError, InvalidParamsError

from birddog.a2a.push import DEFAULT_CONFIG_ID, PushRoute, check_push_host, push_route
from birddog.core.egress import EgressPolicy
from birddog.core.errors import BirdDogError, InvalidInput, StoreUnavailable
from birddog.core.push import is_push_agent, push_config_id
from birddog.core.tasks import SentJob
from birddog.core.text import printable

if TYPE_CHECKING:
    from birddog.ports import PushRoutes

log = structlog.get_logger("birddog.a2a")

__all__ = ["PushConfigs", "config_shown", "unavailable"]


class PushConfigs:
    """Push configs as routes of kind ``a2a``: stored (the URL checked), read back per task.

    Args:
        routes: the push configs' routes (each URL checked against the push egress policy).
        egress: the push egress policy, which every address the URL's host resolves to
            must pass now as well.
    """

    def __init__(self, routes: PushRoutes, egress: EgressPolicy) -> None:
        self.routes = routes
        self.egress = egress

    async def stored(self, config: pb.TaskPushNotificationConfig, task_id: str) -> PushRoute:
        """Store a push config as its route, its URL checked against the egress policy now."""
        if not config.url:
            raise InvalidParamsError("pushNotificationConfig.url is required")
        try:
            push = push_route(config, task_id=task_id)
            known = await self.routes.push_route(push.agent_id)
            if known is None:
                await check_push_host(push.url, self.egress)
                await self.routes.add_push_route(push.agent_id, push.url, push.secret)
            elif known.url != push.url or known.secret != push.secret:
                raise InvalidParamsError(
                    f"push config {printable(push.config_id)[:64]!r} was set before otherwise; "
                    "use another id"
                )
        except InvalidInput as exc:
            # An egress refusal (a metadata or private address) is one of these.
            raise InvalidParamsError(
                f"pushNotificationConfig: {printable(str(exc))[:300]}"
            ) from None
        except StoreUnavailable as exc:
            raise unavailable(exc) from None
        log.info("a2a_push_config_set", agent_id=push.agent_id)
        return push

    async def of_job(self, task_id: str, job: SentJob) -> list[pb.TaskPushNotificationConfig]:
        """The push configs among the reply addresses of ``job``'s mail (never credentials)."""
        configs: list[pb.TaskPushNotificationConfig] = []
        for address in job.mail.reply_to if job.mail is not None else []:
            if not is_push_agent(address.agent_id):
                continue
            try:
                route = await self.routes.push_route(address.agent_id)
            except (StoreUnavailable, BirdDogError) as exc:
                log.warning("a2a_push_config_unreadable", error=type(exc).__name__)
                continue
            if route is not None and route.url is not None:
                config_id = push_config_id(route.secret or "") or DEFAULT_CONFIG_ID
                configs.append(config_shown(task_id, config_id, route.url))
        return configs


def config_shown(task_id: str, config_id: str, url: str) -> pb.TaskPushNotificationConfig:
    """A push config as shown back: its id, task and URL (credentials stay sealed)."""
    return pb.TaskPushNotificationConfig(id=config_id, task_id=task_id, url=url)


def unavailable(exc: StoreUnavailable) -> A2AError:
    """The A2A error of a request the database could not serve (logged, never detailed)."""
    log.warning("a2a_database_unavailable", error=type(exc).__name__)
    return InternalError("the mail room's database is unavailable; try again")
