"""The locally built test checkpoints: byte-identical builds, real HF format, useful greedy output."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from radixlm.runtime.checkpoints import synthetic as checkpoints
from radixlm.runtime.checkpoints.synthetic import ARCHS, checkpoint_path, make_checkpoint, make_config

# sha256 of every file of make_checkpoint(path, "llama", "tiny", seed=0). Regenerate (and say why in
# the commit) only when the generator, corpus or chat template change on purpose.
TINY_LLAMA_SHA256 = {
    "config.json": "09f8ffde69264566465a40801b41a1f237edacda94dd00d612ba80f9a5e4692e",
    "generation_config.json": "a2743d70682eecc64dde41ac25be53a9a1134d36ed5777fc9f9a1a29d58dec55",
    "model.safetensors": "3a702df58ef87ffec0425d4017fc2603dac7e6b1e81922602326139a21c12175",
    "tokenizer.json": "c319195285abe6f1a17765b23e1569f75447b14af295ee935111e64760c83ae2",
    "tokenizer_config.json": "226eed80859bdd61768534b64fb328effdc6960ecaa42f14b3b5511a370e2d1a",
}


def _file_hashes(path: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(path.iterdir())}


def test_tiny_llama_files_match_committed_checksum(tmp_path):
    out = make_checkpoint(tmp_path / "ckpt", "llama", "tiny", seed=0)
    assert _file_hashes(out) == TINY_LLAMA_SHA256


def test_bpe_training_is_deterministic_across_thread_counts(tiny_llama, tmp_path):
    # A fresh interpreter with a multi-threaded rayon pool must train the same merges.
    code = (
        "import sys; from pathlib import Path; from radixlm.runtime.checkpoints.tokenizer_training import write_tokenizer_files;"
        "write_tokenizer_files(Path(sys.argv[1]), 8192, True, 4096)"
    )
    out_dir = tmp_path
    env = {**os.environ, "RAYON_NUM_THREADS": "4", "TOKENIZERS_PARALLELISM": "true"}
    subprocess.run([sys.executable, "-c", code, str(out_dir)], check=True, env=env, timeout=120)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert (out_dir / name).read_bytes() == (Path(tiny_llama) / name).read_bytes(), name


def test_seed_changes_weights_but_not_tokenizer(tmp_path):
    a = _file_hashes(make_checkpoint(tmp_path / "a", "qwen3", "tiny", seed=0))
    b = _file_hashes(make_checkpoint(tmp_path / "b", "qwen3", "tiny", seed=1))
    assert a["model.safetensors"] != b["model.safetensors"]
    assert a["tokenizer.json"] == b["tokenizer.json"]


@pytest.fixture(scope="module")
def hf():
    """(torch, transformers); one intra-op thread, since on a busy 2-core box more threads spin (~20x slower)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield torch, transformers
    torch.set_num_threads(threads)


@pytest.mark.parametrize("arch", ARCHS)
def test_arch_loads_in_transformers(checkpoint, hf, arch):
    torch, transformers = hf
    path = checkpoint(arch, "tiny")
    config = json.loads((Path(path) / "config.json").read_text())
    model, info = transformers.AutoModelForCausalLM.from_pretrained(
        path, dtype=torch.float32, output_loading_info=True
    )
    assert not any(info.values()), info  # no missing, unexpected or mismatched tensors
    assert type(model).__name__ == config["architectures"][0]
    names = {name for name, _ in model.named_parameters()}
    assert ("model.layers.0.self_attn.q_proj.bias" in names) == (arch == "qwen2")
    assert ("model.layers.0.self_attn.q_norm.weight" in names) == (arch == "qwen3")
    tok = transformers.AutoTokenizer.from_pretrained(path)
    ids = tok("The keeper climbed the tower.", return_tensors="pt").input_ids
    assert (ids[0, 0].item() == config["bos_token_id"]) == (arch in ("llama", "mistral"))
    with torch.no_grad():
        logits = model(ids).logits
    assert logits.shape == (1, ids.shape[1], config["vocab_size"])
    assert torch.isfinite(logits).all()


def test_greedy_output_has_clear_margins_and_is_not_degenerate(tiny_llama, hf):
    torch, transformers = hf
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_llama, dtype=torch.float32)
    tok = transformers.AutoTokenizer.from_pretrained(tiny_llama)
    for prompt in ("The lighthouse keeper", "def fibonacci(n):", "日本語の文章"):
        ids = tok(prompt, return_tensors="pt").input_ids
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=30, do_sample=False, eos_token_id=None, pad_token_id=0,
                                 output_logits=True, return_dict_in_generate=True)
        new = out.sequences[0, ids.shape[1] :].tolist()
        top2 = torch.cat(out.logits).topk(2, dim=-1).values  # [30, 2]: the logits that chose each token
        assert (top2[:, 0] - top2[:, 1]).min().item() > 1e-3, prompt
        assert len(set(new)) >= 15, (prompt, new)


def test_config_has_hf_fields_and_sizes():
    ids = {"bos": 0, "eos": 1, "im_end": 3, "pad": 4}
    tiny = make_config("llama", "tiny", ids)
    assert (tiny["hidden_size"], tiny["num_hidden_layers"], tiny["num_attention_heads"]) == (256, 4, 8)
    assert (tiny["num_key_value_heads"], tiny["head_dim"], tiny["vocab_size"]) == (4, 32, 8192)
    small = make_config("qwen2", "small", ids)
    assert (small["hidden_size"], small["num_hidden_layers"], small["intermediate_size"]) == (1024, 12, 2816)
    assert (small["num_attention_heads"], small["num_key_value_heads"], small["vocab_size"]) == (16, 8, 32000)
    assert small["attention_bias"] is True
    qwen3 = make_config("qwen3", "tiny", ids)
    assert qwen3["head_dim"] * qwen3["num_attention_heads"] != qwen3["hidden_size"]
    assert make_config("mistral", "tiny", ids)["sliding_window"] is None


def test_overrides_tie_embeddings(tmp_path):
    from safetensors import safe_open

    out = make_checkpoint(tmp_path / "tied", "qwen2", "tiny", overrides={"tie_word_embeddings": True})
    assert json.loads((out / "config.json").read_text())["tie_word_embeddings"] is True
    with safe_open(str(out / "model.safetensors"), "np") as f:
        assert "lm_head.weight" not in set(f.keys())


def test_bad_arch_and_size_are_named():
    with pytest.raises(ValueError, match="arch"):
        make_checkpoint("/nonexistent", arch="gpt2")
    with pytest.raises(ValueError, match="size"):
        checkpoint_path(size="huge")


def test_checkpoint_path_builds_once_and_survives_a_race(tmp_path, monkeypatch):
    monkeypatch.setenv("RADIXLM_CACHE", str(tmp_path))
    results: list[str] = []
    threads = [threading.Thread(target=lambda: results.append(checkpoint_path("llama", "tiny"))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(results)) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == [Path(results[0]).name]
    assert checkpoints.content_version() in results[0]
    assert checkpoint_path("llama", "tiny") == results[0]
    assert checkpoints.default_model_path() == results[0]


@pytest.mark.unit
def test_stale_building_folders_are_removed_before_a_build(tmp_path):
    """A build killed midway leaves ``.building-<name>-<pid>-*``: the next build of that name removes
    it once its process is gone, and keeps a live process's folder."""
    from radixlm.runtime.checkpoints.build_cache import build_cached

    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = tmp_path / f".building-model-{dead.pid}-abc"
    live = tmp_path / f".building-model-{os.getpid()}-def"
    for folder in (stale, live):
        folder.mkdir()
        (folder / "half.bin").write_bytes(b"x")
    out = build_cached(tmp_path / "model", lambda tmp: (tmp / "done").write_text("ok"))
    assert (tmp_path / "model" / "done").read_text() == "ok" and out == str(tmp_path / "model")
    assert not stale.exists() and live.exists()
