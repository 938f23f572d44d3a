import pytest

from helm_operator.runtime import allocator


def test_the_arena_cap_is_set_on_glibc() -> None:
    assert allocator._LIBC is not None  # the machines we run on use glibc
    assert allocator.limit_arenas() is True


def test_malloc_arena_max_from_the_environment_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert allocator.limit_arenas() is False


def test_without_glibc_both_are_no_ops(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(allocator, "_LIBC", None)
    assert allocator.limit_arenas() is False
    assert allocator.trim() is False
