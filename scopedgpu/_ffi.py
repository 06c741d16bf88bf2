"""The one module that imports the compiled extension (ffi and lib)."""
from __future__ import annotations

import hashlib
from pathlib import Path

try:
    from scopedgpu._sg import ffi, lib
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError(
        f"scopedgpu's C extension cannot be imported ({exc}): if it is not built, run "
        "`python build_ffi.py` in the source tree, or `pip install .`") from exc

__all__ = ["ffi", "lib"]


def _source_hash(csrc: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(csrc.glob("*.[ch]")):
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


# In a source checkout, refuse an extension built from other C sources than the ones
# beside it: a stale build fails in confusing ways (cryptography does the same).
_csrc = Path(__file__).resolve().parent.parent / "csrc"
if (_csrc / "sg.h").exists():
    _built = ffi.string(lib.sg_build_id()).decode()
    _expected = _source_hash(_csrc)
    if _built != _expected:
        raise ImportError(
            f"scopedgpu's C extension ({_built}) was built from other sources than "
            f"csrc/ ({_expected}): rebuild it with `python build_ffi.py` "
            "(or `pip install -e .`)")
