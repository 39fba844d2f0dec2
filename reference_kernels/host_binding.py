"""Binds the compiled host path (``host.py``) to the layers above it: the launcher (its
POISON_OUTPUTS), the index check (its modes' members, tokens and ledgers), the tuning knobs and the
ops' backward functions (``ops.host_path_backward``, ``tbe.host_path_backward``,
``tbe.host_path_update``), which the library calls back (``csrc/host_path.cpp``, ``init``).

``host.py`` sits below the launcher and the index check (they offer it their plans), so it cannot
import them; this module stands above the ops and is registered by the package's ``__init__``
(``host.use_binding``). It imports the layers it binds on first use only: ``import
reference_kernels`` stays free of torch and the CUDA bindings.
"""

from __future__ import annotations

from typing import Any

from . import host


def init(library: Any) -> None:
    """``library.init``: the launch entry points and the Python callbacks, in host_path.cpp's order;
    programmatic launches where ``host.launch_ex_address`` allows them."""
    import torch

    from . import index_check, launch, ops, tbe, tuning

    library.init(host.launch_address(), torch._C._cuda_getDevice, torch._C._cuda_getCurrentRawStream,
                 index_check.HOST_MODES, index_check._TOKENS, tuning, host.raise_launch_error, launch,
                 host.transforms_active(), ops.host_path_backward, tbe.host_path_backward, tbe.host_path_update)
    library.set_launch_ex(host.launch_ex_address())


def published(library: Any) -> None:
    """The library is in LOADED: offer it the ledgers made before (``index_check.ledger`` offers
    those made from now on)."""
    from . import index_check

    for book in list(index_check._LEDGERS.values()):
        index_check.offer_ledger(library, book)


BINDING = host.Binding(init=init, published=published)
