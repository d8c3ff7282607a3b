"""The daemon's turn gauges: the last hour's groups set as they are, a group gone is gone."""

from __future__ import annotations

from birddog.metrics import Metrics


def test_the_turn_gauges_follow_the_window() -> None:
    """Turns, mails and spawns per (kind, how); the next look drops a group no longer there."""
    metrics = Metrics()
    metrics.observe_turns(
        [
            {"kind": "task", "how": "live", "turns": 3, "mails": 3, "spawns": 0},
            {"kind": "report", "how": "worker", "turns": 1, "mails": 20, "spawns": 1},
        ]
    )
    text = metrics.exposition().decode()
    assert 'birddog_turns_last_hour{how="live",kind="task"} 3.0' in text
    assert 'birddog_turn_mails_last_hour{how="worker",kind="report"} 20.0' in text
    assert 'birddog_spawns_last_hour{how="worker",kind="report"} 1.0' in text
    metrics.observe_turns([{"kind": "task", "how": "live", "turns": 1, "mails": 1, "spawns": 0}])
    text = metrics.exposition().decode()
    assert 'birddog_turns_last_hour{how="live",kind="task"} 1.0' in text
    assert 'kind="report"' not in text
