# Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
"""The ``vllm.general_plugins`` entry point of the connector (python/pyproject.toml names it; vLLM calls
:func:`register` in every process before it builds an engine).

It does two things and nothing else:

1. Under a vLLM it does not support (:func:`reprise.vllm.supported_vllm_version`) it logs a warning and patches
   nothing: vLLM loads general plugins in every process without catching their errors, so raising here would break
   every use of vLLM where Reprise is installed, connector or not. The connector refuses to start there instead.
2. It lets the connector end a prefill step where Reprise captures a snapshot. vLLM's scheduler already has that
   hook for its own hybrid caching: ``Scheduler._mamba_block_aligned_split(request, num_new_tokens, ...)`` clips a
   prefill chunk so it ends on a block boundary, called for running and waiting requests alike
   (``vllm/v1/core/sched/scheduler.py``, 0.32.0: lines 724-727 and 1173-1180), but only when
   ``need_mamba_block_aligned_split`` is true, i.e. in ``mamba_cache_mode='align'`` (line 377). With the connector
   vLLM's own prefix caching is off (mode 'none'), so once the scheduler is built the patch sets, on that scheduler
   instance only, ``need_mamba_block_aligned_split = True`` and ``_mamba_block_aligned_split`` to the connector's
   :meth:`~reprise.vllm.connector.RepriseConnector.split_prefill`. The flags vLLM derives from the attribute in its
   constructor (``mamba_partial_cache_hit``, ``mamba_shared_prefix_checkpoint``, lines 397-409) were computed
   before and stay false. Schedulers without a Reprise connector are left as they were.
"""

from __future__ import annotations

from . import VLLM_VERSION, supported_vllm_version

_patched = False


def register() -> bool:
    """Patches vLLM's scheduler (once per process); False, with a warning, under a vLLM it does not support."""
    global _patched
    import vllm

    if not supported_vllm_version(vllm.__version__):
        from vllm.logger import init_logger

        init_logger(__name__).warning(
            "reprise.vllm: vLLM %s is not a release the connector supports (%s series); the plugin changes nothing "
            "and the Reprise connector will refuse to start", vllm.__version__, VLLM_VERSION)
        return False
    if _patched:
        return True
    from vllm.v1.core.sched.scheduler import Scheduler

    _patched = True
    init = Scheduler.__init__

    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        from .connector import RepriseConnector

        if isinstance(self.connector, RepriseConnector):
            self.need_mamba_block_aligned_split = True
            self._mamba_block_aligned_split = self.connector.split_prefill

    Scheduler.__init__ = __init__
    return True
