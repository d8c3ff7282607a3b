"""The base of every BirdDog model and the text rules they share."""

from __future__ import annotations

from typing import Annotated, Any, Self

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from birddog.core.errors import InvalidInput
from birddog.core.text import escape_char, first_control

ID_MAX_LENGTH = 256
"""Agent, session, job and command ids are 1 to this many characters."""

KEY_MAX_LENGTH = 512
"""A mail key is 1 to this many characters, so a reply key stays well inside an index."""


def check_text(value: str) -> str:
    """Refuse text that PostgreSQL or UTF-8 cannot carry.

    Args:
        value: the text to check.

    Returns:
        The text unchanged.

    Raises:
        ValueError: the text holds a NUL character or a lone surrogate.
    """
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("must be valid Unicode (no lone surrogates)") from None
    return value


def check_name(value: str) -> str:
    """Refuse a key or id that holds a control character.

    Keys and ids are printed by the CLI, the console and logs, and travel in HTTP
    headers (``webhook-id``), so they may hold no C0 or C1 control, DEL, bidi override
    or isolate, zero-width or other format character, line separator or lone surrogate
    (see :func:`birddog.core.text.is_control`); such a key could never be sent.

    Args:
        value: the key or id to check.

    Returns:
        The value unchanged.

    Raises:
        ValueError: the value holds such a character; the message names it and its index.
    """
    index = first_control(value)
    if index is not None:
        raise ValueError(
            f"must not contain control or format characters "
            f"({escape_char(value[index])} at index {index})"
        )
    return value


Text = Annotated[str, Field(strict=True), AfterValidator(check_text)]
"""Any string that can be stored and sent: no NUL, no lone surrogate."""

Name = Annotated[str, Field(strict=True), AfterValidator(check_name)]
"""A key of any length that is safe to print and to send in a header (a reply key)."""

Id = Annotated[
    str, Field(strict=True, min_length=1, max_length=ID_MAX_LENGTH), AfterValidator(check_name)
]
"""An id: 1 to 256 characters, none of them a control character."""

Key = Annotated[
    str, Field(strict=True, min_length=1, max_length=KEY_MAX_LENGTH), AfterValidator(check_name)
]
"""A mail key: 1 to 512 characters, none of them a control character."""


class Model(BaseModel):
    """A frozen model with camelCase JSON names that refuses unknown fields.

    Construction by Python name (``agent_id=``) or JSON name (``agentId=``) both work;
    invalid input raises :class:`~birddog.InvalidInput` naming each field.
    """

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
    )

    def __init__(self, /, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise InvalidInput.from_pydantic(type(self).__name__, exc.errors()) from None

    # Nested models are validated by pydantic-core directly, so their errors keep the
    # full path ("replyTo.0.agentId"); only the outermost call translates them.
    __init__.__pydantic_base_init__ = True  # type: ignore[attr-defined]

    @classmethod
    def model_validate(
        cls,
        obj: Any,
        *,
        strict: bool | None = None,
        extra: Any = None,
        from_attributes: bool | None = None,
        context: Any | None = None,
        by_alias: bool | None = None,
        by_name: bool | None = None,
    ) -> Self:
        """Validate a Python object, raising InvalidInput on bad input."""
        try:
            return super().model_validate(
                obj,
                strict=strict,
                extra=extra,
                from_attributes=from_attributes,
                context=context,
                by_alias=by_alias,
                by_name=by_name,
            )
        except ValidationError as exc:
            raise InvalidInput.from_pydantic(cls.__name__, exc.errors()) from None

    @classmethod
    def model_validate_json(
        cls,
        json_data: str | bytes | bytearray,
        *,
        strict: bool | None = None,
        extra: Any = None,
        context: Any | None = None,
        by_alias: bool | None = None,
        by_name: bool | None = None,
    ) -> Self:
        """Validate JSON text, raising InvalidInput on bad input."""
        try:
            return super().model_validate_json(
                json_data,
                strict=strict,
                extra=extra,
                context=context,
                by_alias=by_alias,
                by_name=by_name,
            )
        except ValidationError as exc:
            raise InvalidInput.from_pydantic(cls.__name__, exc.errors()) from None
