"""The public API is exactly the sorted __all__ of birddog."""

from __future__ import annotations

import types

import birddog


def test_all_is_sorted_and_complete() -> None:
    """Every public name is exported, __all__ is sorted, and every name resolves."""
    assert birddog.__all__ == sorted(birddog.__all__, key=lambda n: (not n.isupper(), n))
    public = {
        name
        for name in dir(birddog)
        if not name.startswith("_") and not isinstance(getattr(birddog, name), types.ModuleType)
    }
    assert public == set(birddog.__all__)
    for name in birddog.__all__:
        assert getattr(birddog, name) is not None


def test_public_members_have_docstrings() -> None:
    """Every exported class and function documents itself."""
    for name in birddog.__all__:
        member = getattr(birddog, name)
        if callable(member) and not isinstance(member, type(birddog.DeliveryResult)):
            assert (member.__doc__ or "").strip(), name
