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
3. Under vLLM's OpenAI server with the connector's policy reading capture offsets ('chat'), it passes each chat
   request's system prompt end, so that the next conversation over the same system prompt restores there at its
   first meeting with no change to the client: ``OpenAIServingChat.render_chat_request`` renders the request as
   before, then the request's leading system (and developer) messages alone with the same template, tools and
   template arguments, and the length of the common token prefix of the two is the offset
   (:func:`system_prompt_end`), set in the request's ``kv_transfer_params`` unless the client set one. A template
   that renders nothing common (or fails without a user message) gives no offset and no error; renderings are
   remembered per system part (:data:`_SYSTEM_ENDS` entries), so a system prompt is rendered alone once.
"""

from __future__ import annotations

import collections
import json
from typing import Any

from . import CAPTURE_OFFSETS, VLLM_VERSION, supported_vllm_version

_patched = False

#: How many system parts the chat server remembers the rendered token ids of.
_SYSTEM_ENDS = 256

#: Message roles that make up a conversation's shared head.
_SYSTEM_ROLES = ("system", "developer")


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
    _patch_chat_server()
    return True


def system_prompt_end(full: list[int], system_alone: list[int]) -> int | None:
    """The capture offset of a chat prompt: the length of the common token prefix of the whole prompt (`full`) and
    of its leading system messages rendered alone (`system_alone`); None when they share nothing or the system part
    is the whole prompt (no later message, nothing for another conversation to share past it)."""
    n = 0
    for a, b in zip(full, system_alone):
        if a != b:
            break
        n += 1
    return n if 0 < n < len(full) else None


def _patch_chat_server() -> None:
    try:
        from vllm.entrypoints.openai.chat_completion.serving import OpenAIServingChat
    except ImportError:   # a vLLM without its OpenAI server's dependencies: nothing to patch
        return
    render = OpenAIServingChat.render_chat_request
    remembered: collections.OrderedDict[str, list[int]] = collections.OrderedDict()

    def derives_offsets(serving) -> bool:
        config = getattr(getattr(serving.engine_client, "vllm_config", None), "kv_transfer_config", None)
        if config is None or config.kv_connector != "RepriseConnector":
            return False
        from .connector import _READS_CAPTURE_OFFSETS

        return (config.kv_connector_extra_config or {}).get("policy", "strict") in _READS_CAPTURE_OFFSETS

    async def system_alone(serving, request) -> list[int] | None:
        head = []
        for m in request.messages:
            role = m.get("role") if isinstance(m, dict) else getattr(m, "role", None)
            if role not in _SYSTEM_ROLES:
                break
            head.append(m)
        if not head or len(head) == len(request.messages):
            return None
        key = json.dumps([head, request.tools, request.chat_template, request.chat_template_kwargs,
                          request.add_special_tokens], default=str, sort_keys=True)
        if key in remembered:
            remembered.move_to_end(key)
            return remembered[key]
        alone = request.model_copy(update={"messages": head, "add_generation_prompt": False,
                                           "continue_final_message": False, "kv_transfer_params": None})
        result = await serving.online_renderer.render_chat(alone)
        if not isinstance(result, tuple) or len(result[1]) != 1:
            return None
        ids = list(serving._extract_prompt_components(result[1][0]).token_ids or [])
        remembered[key] = ids
        if len(remembered) > _SYSTEM_ENDS:
            remembered.popitem(last=False)
        return ids

    async def render_chat_request(self, request):
        result = await render(self, request)
        if not isinstance(result, tuple) or len(result[1]) != 1 or not derives_offsets(self):
            return result
        params: dict[str, Any] = dict(request.kv_transfer_params or {})
        if CAPTURE_OFFSETS in params:
            return result   # the client's own
        try:
            alone = await system_alone(self, request)
            full = list(self._extract_prompt_components(result[1][0]).token_ids or [])
        except Exception as e:   # a template that cannot render the system part alone: no offset, no error
            from vllm.logger import init_logger

            init_logger(__name__).debug("reprise.vllm: no system prompt end for a chat request (%s)", e)
            return result
        end = system_prompt_end(full, alone) if alone is not None else None
        if end is not None:
            params[CAPTURE_OFFSETS] = [end]
            request.kv_transfer_params = params
        return result

    render_chat_request.__wrapped__ = render
    OpenAIServingChat.render_chat_request = render_chat_request
