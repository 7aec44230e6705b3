"""A vLLM worker for the tiny model: the connector built by vLLM's factory
steps, the KV caches in an attention backend's layout, and each step run
through the KV-connector hooks in the model runner's order.

Followed from vLLM's source (file:function@commit):

- factory.py:KVConnectorFactory.create_connector / _get_connector_class_with_compat
  @a4cd9d0: import ``kv_connector_module_path``, take the class named
  ``kv_connector``, the HMA check, ``cls(config, role, kv_cache_config)``
  (``cls(config, role)`` for a class without ``kv_cache_config``);
- distributed/kv_transfer/kv_transfer_state.py:ensure_kv_transfer_initialized:
  the WORKER connector is made before the KV caches are;
- v1/worker/gpu_worker.py (WorkerBase.__init__ sets parallel_config.rank),
  gpu_model_runner.py:initialize_kv_cache@000fc94: ``register_kv_caches``
  then ``set_host_xfer_buffer_ops``; each pipeline stage registers only its
  own layers;
- gpu_model_runner.py:execute_model@000fc94: ``handle_preemptions(metadata)``
  every step before the states are updated; no tokens: kv_connector_no_forward;
- kv_connector_model_runner_mixin.py:_get_kv_connector_output: the
  ``isinstance(connector, KVConnectorBase)`` assert, bind, start_load_kv,
  the forward, wait_for_save, get_finished, get_block_ids_with_load_errors,
  stats, events, build_connector_worker_meta, clear. ``runner="003df29"``
  follows the version of the pinned commit (I#51890299087: start_load_kv
  before the forward, get_finished); ``runner="00f4240"`` newer main
  (start_load_kv before the forward only when ``has_sync_kv_loads``, after
  it otherwise; get_transfer_results);
- model_executor/layers/attention/kv_transfer_utils.py:maybe_transfer_kv_layer
  @2b9269b: nothing unless the agent is a KVConnectorBase_V1 and has
  metadata and attn_metadata is set; then wait_for_layer_load, the
  attention op (which writes the step's KV), save_kv_layer(name,
  kv_cache, attn_metadata).

Layouts (v1/attention/backends/flash_attn.py@5704f34, flashinfer.py@5314c90,
MLA): FlashAttention ``(2, nb, bs, H, D)``, FlashInfer ``(nb, 2, bs, H,
D)``, each NHD or HND (the tensor a permuted view of the physical order, as
the runner's allocate path leaves it), MLA ``(nb, bs, latent)``.

Tensor parallelism: each rank holds its heads' KV and computes their
attention; the heads' outputs are all-gathered (gloo) before the output
projection. Pipeline parallelism: stage 0 runs the first half of the layers
and sends the hidden states to stage 1 (gloo), which runs the rest and the
head. Each request of a step is computed on its own, so its arithmetic does
not depend on what else is in the batch.
"""
from __future__ import annotations

import importlib
import inspect
import math
import sys
from contextlib import contextmanager
from typing import Any, Dict, Iterator, List, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch.utils import mkldnn

from model import Config, TinyLM, block_in_dtype, bmm_t, deterministic, linear_in_dtype
from vllm_types import (AttentionMetadata, ForwardContext, KVCacheConfig, KVConnectorOutput,
                        ModelRunnerOutput, SchedulerOutput, VllmConfig)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
MLA_LATENT = 96


# --- the factory, re-implemented from factory.py@a4cd9d0 ------------------

def supports_kw(cls: Any, kw: str) -> bool:
    """vllm.utils.func_utils.supports_kw: the callable takes ``kw`` by name."""
    params = inspect.signature(cls).parameters
    return kw in params and params[kw].kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                 inspect.Parameter.KEYWORD_ONLY)


def get_connector_class(kv_transfer_config: Any) -> Tuple[type, bool]:
    """_get_connector_class_with_compat: (class, compat signature)."""
    name = kv_transfer_config.kv_connector
    if name is None:
        raise ValueError("Connector name is not set in KVTransferConfig")
    path = kv_transfer_config.kv_connector_module_path
    if path is None:
        raise ValueError(f"Unsupported connector type: {name}")
    module = importlib.import_module(path)
    try:
        cls = getattr(module, name)
    except AttributeError as e:
        raise AttributeError(f"Class {name} not found in {path}") from e
    return cls, not supports_kw(cls, "kv_cache_config")


def base_module() -> Any:
    """The module of the KVConnectorBase_V1 the connector subclasses: vLLM's
    when importable, else maru's stand-in (the factory and the checks below
    use its names, as vLLM uses its own)."""
    from maru.vllm import KVConnectorBase_V1

    return sys.modules[KVConnectorBase_V1.__module__]


def create_connector(config: VllmConfig, role: Any, kv_cache_config: Any) -> Any:
    """KVConnectorFactory.create_connector."""
    ktc = config.kv_transfer_config
    if ktc is None:
        raise ValueError("kv_transfer_config must be set to create a connector")
    cls, compat = get_connector_class(ktc)
    hma_enabled = not config.scheduler_config.disable_hybrid_kv_cache_manager
    if hma_enabled and not base_module().supports_hma(cls):
        raise ValueError(f"Connector {cls.__name__} does not support HMA but HMA is enabled. "
                         "Please set `--disable-hybrid-kv-cache-manager`.")
    return cls(config, role) if compat else cls(config, role, kv_cache_config)


# --- the model, in a dtype, a layout, a rank ---------------------------------

class Weights:
    """The tiny model's weights (model.py's, same seed) for one stage, in the
    compute dtype; MLA adds a down and two up projections of its own seed."""

    def __init__(self, cfg: Config, dtype: torch.dtype, layers: Sequence[int], mla: bool):
        model = TinyLM(cfg)
        self.cfg = cfg
        # fp16 has no CPU matmul here: computed in fp32, its KV stored in fp16.
        self.compute = torch.bfloat16 if dtype == torch.bfloat16 else torch.float32
        self.tok, self.pos = model.tok, model.pos
        self.ln = model.ln
        self.head = model.head
        self.blocks = {i: model.blocks[i] for i in layers}
        if self.compute == torch.bfloat16:
            self.tok, self.pos, self.ln = (m.to(torch.bfloat16) for m in
                                           (self.tok, self.pos, self.ln))
            self.head = linear_in_dtype(self.head, torch.bfloat16)
            self.blocks = {i: block_in_dtype(b, torch.bfloat16) for i, b in self.blocks.items()}
        self.mla = None
        if mla:
            gen = torch.Generator().manual_seed(cfg.seed + 7)
            d = cfg.d_model

            def lin(i: int, o: int) -> torch.nn.Module:
                m = torch.nn.Linear(i, o, bias=False)
                with torch.no_grad():
                    m.weight.copy_(torch.randn(o, i, generator=gen) / math.sqrt(i))
                return mkldnn.to_mkldnn(m, self.compute) if self.compute == torch.bfloat16 \
                    else mkldnn.to_mkldnn(m)

            self.mla = {i: (lin(d, MLA_LATENT), lin(MLA_LATENT, d), lin(MLA_LATENT, d))
                        for i in range(cfg.n_layers)}
            self.mla = {i: self.mla[i] for i in layers}


def allocate_kv_cache(layout: str, hnd: bool, num_blocks: int, block_size: int, heads: int,
                      head_dim: int, dtype: torch.dtype) -> torch.Tensor:
    """One layer's cache in the backend's logical shape; HND as a permuted
    view of the physical tensor, as the model runner leaves it."""
    if layout == "mla":
        return torch.zeros(num_blocks, block_size, MLA_LATENT, dtype=dtype)
    if layout == "flash_attn":
        if hnd:
            return torch.zeros(2, num_blocks, heads, block_size, head_dim,
                               dtype=dtype).permute(0, 1, 3, 2, 4)
        return torch.zeros(2, num_blocks, block_size, heads, head_dim, dtype=dtype)
    if hnd:
        return torch.zeros(num_blocks, 2, heads, block_size, head_dim,
                           dtype=dtype).permute(0, 1, 3, 2, 4)
    return torch.zeros(num_blocks, 2, block_size, heads, head_dim, dtype=dtype)


def _half(cache: torch.Tensor, layout: str, half: int) -> torch.Tensor:
    """K (0) or V (1) of every block: a view (blocks, block_size, heads, head_dim)."""
    return cache[half] if layout == "flash_attn" else cache[:, half]


class Runner:
    """GPUModelRunner with KVConnectorModelRunnerMixin, for the tiny model."""

    def __init__(self, vllm_config: VllmConfig, kv_cache_config: KVCacheConfig, layout: str,
                 hnd: bool, runner: str, cfg: Config = Config(), hooks: Any = None):
        pc = vllm_config.parallel_config
        self.vllm_config, self.cfg, self.layout, self.runner = vllm_config, cfg, layout, runner
        self.tp, self.tp_size = pc.rank % pc.tensor_parallel_size, pc.tensor_parallel_size
        self.pp, self.pp_size = pc.rank // pc.tensor_parallel_size, pc.pipeline_parallel_size
        per_stage = cfg.n_layers // self.pp_size
        self.layers = list(range(self.pp * per_stage, (self.pp + 1) * per_stage))
        self.heads = cfg.n_heads // self.tp_size
        self.head_lo = self.tp * self.heads
        self.bs = vllm_config.cache_config.block_size
        # gpu_model_runner.py:prepare_kernel_block_sizes: a block of the
        # manager may be several kernel blocks of the cache tensor.
        self.kb = vllm_config.cache_config.kernel_block_size or self.bs
        dtype = DTYPES[vllm_config.model_config.dtype]
        self.kv_dtype = dtype
        self.w = Weights(cfg, dtype, self.layers, layout == "mla")
        self.names = {i: f"model.layers.{i}.self_attn.attn" for i in self.layers}
        self.hooks = hooks  # (step, layer) -> None after save_kv_layer, for tests
        self.step_no = 0
        # ensure_kv_transfer_initialized, then initialize_kv_cache.
        from maru.vllm import KVConnectorRole

        ktc = vllm_config.kv_transfer_config
        self.connector = None
        if ktc is not None and ktc.is_kv_transfer_instance:
            self.connector = create_connector(vllm_config, KVConnectorRole.WORKER,
                                              kv_cache_config)
        n = kv_cache_config.num_blocks
        n = n * (self.bs // self.kb)
        self.kv = {self.names[i]: allocate_kv_cache(layout, hnd, n, self.kb, self.heads,
                                                    cfg.head_dim, dtype) for i in self.layers}
        if self.connector is not None:
            self.connector.register_kv_caches(self.kv)
            self.connector.set_host_xfer_buffer_ops(_copy_blocks)
        self.requests: Dict[str, Dict[str, Any]] = {}

    # --- the mixin ----------------------------------------------------------

    def is_v1_kv_transfer_group(self) -> bool:
        """kv_transfer_state.is_v1_kv_transfer_group: isinstance against the base."""
        return isinstance(self.connector, base_module().KVConnectorBase_V1)

    @contextmanager
    def kv_connector_output(self, so: SchedulerOutput,
                            ctx: ForwardContext) -> Iterator[KVConnectorOutput]:
        output = KVConnectorOutput()
        connector = self.connector
        assert isinstance(connector, base_module().KVConnectorBase_V1)
        assert so.kv_connector_metadata is not None
        connector.bind_connector_metadata(so.kv_connector_metadata)
        start_after = self.runner == "00f4240" and not so.has_sync_kv_loads
        if not start_after:
            connector.start_load_kv(ctx)
        try:
            yield output
        finally:
            if start_after:
                connector.start_load_kv(ctx)
            connector.wait_for_save()
            if self.runner == "00f4240":
                results = connector.get_transfer_results(so.finished_req_ids)
                output.finished_sending = results.finished_sending
                output.finished_recving = results.finished_recving
                output.failed_recving = results.failed_recving
            else:
                output.finished_sending, output.finished_recving = \
                    connector.get_finished(so.finished_req_ids)
            output.invalid_block_ids = connector.get_block_ids_with_load_errors()
            output.kv_connector_stats = connector.get_kv_connector_stats()
            output.kv_cache_events = connector.get_kv_connector_kv_cache_events()
            output.kv_connector_worker_meta = connector.build_connector_worker_meta()
            connector.clear_connector_metadata()

    # --- execute_model ------------------------------------------------------

    def _update_states(self, so: SchedulerOutput) -> None:
        for req_id in so.finished_req_ids:
            self.requests.pop(req_id, None)
        for new in so.scheduled_new_reqs:
            self.requests[new.req_id] = {"tokens": list(new.prompt_token_ids),
                                         "blocks": list(new.block_ids[0])}
        c = so.scheduled_cached_reqs
        for i, req_id in enumerate(c.req_ids):
            st = self.requests.get(req_id)
            if req_id in c.resumed_req_ids or st is None:
                st = self.requests[req_id] = {"tokens": list(c.all_token_ids[req_id]),
                                              "blocks": []}
            else:
                st["tokens"].extend(c.new_token_ids[i])
            if c.new_block_ids[i] is not None:
                if req_id in c.resumed_req_ids:
                    st["blocks"] = list(c.new_block_ids[i][0])
                else:
                    st["blocks"].extend(c.new_block_ids[i][0])

    def execute_model(self, so: SchedulerOutput, send: Any = None,
                      recv: Any = None) -> ModelRunnerOutput:
        if self.connector is not None:
            self.connector.handle_preemptions(so.kv_connector_metadata)
        self._update_states(so)
        self.step_no += 1
        if so.total_num_scheduled_tokens == 0:
            out = ModelRunnerOutput()
            if self.connector is not None:
                with self.kv_connector_output(so, ForwardContext(None)) as kv_out:
                    pass
                out.kv_connector_output = kv_out
            return out
        plan = self._plan(so)
        ctx = ForwardContext({self.names[i]: plan["meta"] for i in self.layers},
                             dict(self.kv))
        if self.connector is None:
            logits = self._forward(plan, ctx, send, recv)
            return ModelRunnerOutput(list(plan["reqs"]), logits)
        with self.kv_connector_output(so, ctx) as kv_out:
            logits = self._forward(plan, ctx, send, recv)
        return ModelRunnerOutput(list(plan["reqs"]), logits, kv_out)

    def _plan(self, so: SchedulerOutput) -> Dict[str, Any]:
        reqs = {}
        computed = {n.req_id: n.num_computed_tokens for n in so.scheduled_new_reqs}
        c = so.scheduled_cached_reqs
        computed.update(zip(c.req_ids, c.num_computed_tokens))
        for req_id, n in so.num_scheduled_tokens.items():
            st = self.requests[req_id]
            start = computed[req_id]
            end = start + n
            table = st["blocks"]
            slots = [table[p // self.bs] * self.bs + p % self.bs for p in range(end)]
            reqs[req_id] = {"tokens": st["tokens"][start:end], "start": start, "end": end,
                            "slots": torch.tensor(slots, dtype=torch.long)}
        meta = AttentionMetadata(
            slot_mapping={r: v["slots"][v["start"]:] for r, v in reqs.items()},
            block_table={r: list(self.requests[r]["blocks"]) for r in reqs},
            seq_lens={r: v["end"] for r, v in reqs.items()})
        return {"reqs": reqs, "meta": meta}

    @torch.no_grad()
    def _forward(self, plan: Dict[str, Any], ctx: ForwardContext, send: Any,
                 recv: Any) -> Dict[str, torch.Tensor]:
        w, cfg = self.w, self.cfg
        reqs = plan["reqs"]
        if self.pp == 0:
            x = {r: w.tok(torch.as_tensor(v["tokens"])) +
                 w.pos(torch.arange(v["start"], v["end"])) for r, v in reqs.items()}
        else:
            x = recv({r: (v["end"] - v["start"], cfg.d_model) for r, v in reqs.items()},
                     w.compute)
        for i in self.layers:
            name = self.names[i]
            hook = self.connector is not None and self.is_v1_kv_transfer_group() and \
                ctx.attn_metadata is not None and self.connector.has_connector_metadata()
            if hook:
                self.connector.wait_for_layer_load(name)
            outs = {r: self._attention(i, x[r], v) for r, v in reqs.items()}
            if hook:
                self.connector.save_kv_layer(name, self.kv[name], ctx.attn_metadata[name])
                if self.hooks is not None:
                    self.hooks(self.step_no, i)
            block = w.blocks[i]
            for r in reqs:
                x[r] = x[r] + block.out(outs[r])
                x[r] = x[r] + block.down(F.gelu(block.up(block.ln2(x[r]))))
        if self.pp < self.pp_size - 1:
            send(x)
            return {}
        return {r: w.head(w.ln(x[r][-1:]))[0].float() for r in reqs}

    def _attention(self, layer: int, x: torch.Tensor, req: Dict[str, Any]) -> torch.Tensor:
        """The attention op of one request: writes the step's KV into the
        cache, attends over the request's slots, returns [t, d_model] of all
        heads (gathered across tensor-parallel ranks)."""
        w, cfg = self.w, self.cfg
        block = w.blocks[layer]
        t, start = x.shape[0], req["start"]
        slots = req["slots"]
        blk, off = slots // self.kb, slots % self.kb  # kernel blocks
        h = block.ln1(x)
        q, k, v = block.qkv(h).view(t, 3, cfg.n_heads, cfg.head_dim).unbind(1)
        lo, hi = self.head_lo, self.head_lo + self.heads
        cache = self.kv[self.names[layer]]
        if self.layout == "mla":
            down, k_up, v_up = w.mla[layer]
            cache[blk[start:], off[start:]] = down(h).to(self.kv_dtype)
            latent = cache[blk, off].to(w.compute)
            keys = k_up(latent).view(-1, cfg.n_heads, cfg.head_dim)[:, lo:hi]
            values = v_up(latent).view(-1, cfg.n_heads, cfg.head_dim)[:, lo:hi]
        else:
            kc, vc = _half(cache, self.layout, 0), _half(cache, self.layout, 1)
            kc[blk[start:], off[start:]] = k[:, lo:hi].to(self.kv_dtype)
            vc[blk[start:], off[start:]] = v[:, lo:hi].to(self.kv_dtype)
            keys, values = kc[blk, off].to(w.compute), vc[blk, off].to(w.compute)
        qh = q[:, lo:hi].permute(1, 0, 2).contiguous()
        scores = bmm_t(qh, keys.permute(1, 0, 2).contiguous()) * (1.0 / math.sqrt(cfg.head_dim))
        causal = torch.ones(t, t, dtype=torch.bool).triu(1)
        scores[:, :, start:].masked_fill_(causal, float("-inf"))
        out = bmm_t(torch.softmax(scores, dim=2), values.permute(1, 2, 0).contiguous())
        out = out.permute(1, 0, 2).contiguous()  # [t, heads here, head_dim]
        if self.tp_size > 1:
            wire = _wire(out)  # gloo moves no bfloat16: its bytes
            parts = [torch.empty_like(wire) for _ in range(self.tp_size)]
            torch.distributed.all_gather(parts, wire)
            out = torch.cat(parts, dim=1).view(out.dtype)
        return out.reshape(t, cfg.d_model)

    def shutdown(self) -> None:
        if self.connector is not None:
            self.connector.shutdown()


def _wire(t: torch.Tensor) -> torch.Tensor:
    """``t``'s bits in a dtype gloo carries (bfloat16: its bytes)."""
    return t.contiguous().view(torch.uint8) if t.element_size() == 2 else t.contiguous()


def _copy_blocks(src: Dict[str, torch.Tensor], dst: Dict[str, torch.Tensor],
                 src_ids: List[int], dst_ids: List[int], direction: str) -> None:
    """The CopyBlocksOp the runner hands set_host_xfer_buffer_ops (unused by Maru)."""
    for name, s in src.items():
        dst[name][dst_ids] = s[src_ids]


# --- a worker process -------------------------------------------------------

def worker_main(conn: Any, rank: int, vllm_config: VllmConfig, kv_cache_config: KVCacheConfig,
                layout: str, hnd: bool, runner: str, init_file: str) -> None:
    """A worker process (vLLM's WorkerProc): builds the runner, then answers
    each pickled SchedulerOutput with a ModelRunnerOutput until None."""
    deterministic()
    vllm_config.parallel_config.rank = rank  # WorkerBase.__init__
    pc = vllm_config.parallel_config
    world = pc.world_size
    if world > 1:
        torch.distributed.init_process_group("gloo", init_method=f"file://{init_file}",
                                             rank=rank, world_size=world)
    runner_ = None
    try:
        runner_ = Runner(vllm_config, kv_cache_config, layout, hnd, runner)
        conn.send({"ready": True})

        def send(x: Dict[str, torch.Tensor]) -> None:
            torch.distributed.send(_wire(torch.cat(list(x.values()))),
                                   rank + pc.tensor_parallel_size)

        def recv(shapes: Dict[str, Tuple[int, int]], dtype: torch.dtype):
            total = sum(s[0] for s in shapes.values())
            buf = torch.empty(total, runner_.cfg.d_model, dtype=dtype)
            torch.distributed.recv(_wire(buf), rank - pc.tensor_parallel_size)
            out, at = {}, 0
            for r, s in shapes.items():
                out[r] = buf[at:at + s[0]]
                at += s[0]
            return out

        while True:
            so = conn.recv()
            if so is None:
                break
            conn.send(runner_.execute_model(so, send, recv))
    except BaseException as e:  # the executor reports it
        import traceback

        conn.send({"error": f"{type(e).__name__}: {e}\n{traceback.format_exc()}"})
    finally:
        if runner_ is not None:
            runner_.shutdown()
        if world > 1 and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
        conn.close()
