"""Another thread's destroy() at the worst moment, made deterministic: the manager's lock
replaced by one whose first entry lets the destroy in first, as a thread that destroys
an object may do between a call's unlocked check and its lock section."""
from __future__ import annotations

import contextlib
from typing import Any, Iterator


@contextlib.contextmanager
def destroyed_on_first_entry(manager: Any, obj: Any) -> Iterator[None]:
    """Within the block, the first entry into the manager's lock destroys `obj` (in the
    lock section, as another thread's destroy() would have before it)."""
    state = manager._state
    real = state.lock

    class Racing:
        armed = True

        def __enter__(self) -> bool:
            real.acquire()
            if Racing.armed:
                Racing.armed = False
                obj.destroy()
            return True

        def __exit__(self, *exc: Any) -> None:
            real.release()

        def acquire(self, *args: Any, **kwargs: Any) -> bool:
            return real.acquire(*args, **kwargs)

        def release(self) -> None:
            real.release()

    state.lock = Racing()
    try:
        yield
    finally:
        state.lock = real
