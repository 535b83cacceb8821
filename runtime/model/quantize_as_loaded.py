"""Int8 quantization during loading: each decoder layer, and the embedding with the head, is
quantized as soon as the loader has copied all of its tensors, and its float weights are freed
before the next ones are read. Loading a float32 checkpoint with ``--quantization int8`` then
peaks near the int8 model plus one float layer (or the float embedding), not at the float32 model
plus its int8 copy. ``quantization.quantize_model`` still runs afterwards and quantizes whatever is
left, so the result is the same as quantizing after loading.
"""

from __future__ import annotations

from radixlm.runtime.model.cpu_malloc import release_free_memory
from radixlm.runtime.model.llama import CheckpointLayout, LlamaForCausalLM
from radixlm.runtime.model.quantization import check_quantization, quantize_head, quantize_layer

HEAD = -1  # the group of the embedding and the LM head


class QuantizeAsLoaded:
    """Told of every tensor the loader copied (``loaded``), it quantizes a group once complete:
    layer ``i`` (every checkpoint tensor whose parameter is in ``model.layers[i]``) or the
    embedding with the head. A no-op for a float model (``method`` None)."""

    def __init__(self, model: LlamaForCausalLM, method: str | None, backend: str) -> None:
        self.model, self.backend = model, backend
        self.members: dict[int, list[str]] = {}  # group -> its checkpoint names
        self.waiting: dict[int, set[str]] = {}  # group -> the names not loaded yet
        self.group_of: dict[str, int] = {}
        if check_quantization(method) is None:
            return
        owner = {id(p): i for i, layer in enumerate(model.layers) for p in layer.parameters()}
        heads = {id(p) for p in (model.embed_tokens, model.lm_head) if p is not None}
        for name, target in model.checkpoint_layout().items():
            group = HEAD if id(target.param) in heads else owner.get(id(target.param))
            if group is not None:
                self.group_of[name] = group
                self.members.setdefault(group, []).append(name)
        self.waiting = {group: set(names) for group, names in self.members.items()}

    def loaded(self, name: str, layout: CheckpointLayout) -> None:
        """``name`` was copied; quantize its group if it was the last one, and drop the group's
        entries from ``layout`` (the loader's references to its float parameters)."""
        group = self.group_of.get(name)
        if group is None:
            return
        waiting = self.waiting[group]
        waiting.discard(name)
        if waiting:
            return
        if group == HEAD:
            quantize_head(self.model, self.backend)
        else:
            quantize_layer(self.model.layers[group], self.backend)
        for member in self.members[group]:
            layout.pop(member, None)
        if self.model.tp.device.type == "cpu":
            release_free_memory()  # the group's float weights, now free, out of the resident set
