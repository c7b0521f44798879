"""`userturn train` on the tiny random model: a few real TRL steps (SFT and DPO), the merged model, its manifest, the
provenance in probed records, and the refusals (held-out items, a used --out, an engine that cannot serve it).

Needs the `train` extra (trl, peft, datasets); without it these tests skip.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

pytest.importorskip("trl")
pytest.importorskip("peft")
pytest.importorskip("datasets")

from results_lines import record_lines
from safetensors.torch import load_file

from userturn.cli import main
from userturn.client.train.progress import RichProgress
from userturn.serve.manifest import load_manifest


def _sft_rows(n: int = 8) -> list[dict]:
    return [{"id": f"t{i}", "messages": [{"role": "user", "content": f"what is {i} plus {i}"},
                                         {"role": "assistant", "content": f"the answer is {2 * i}"},
                                         {"role": "user", "content": "why is that the answer"}]} for i in range(n)]


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture
def base_manifest(tmp_path: Path, tiny_model_dir: Path) -> Path:
    path = tmp_path / "base" / "tiny.yaml"
    path.parent.mkdir()
    path.write_text(yaml.safe_dump({
        "name": "tiny", "engine": "transformers", "model": str(tiny_model_dir), "served_model_name": "tiny",
        "seed": 0, "extra_args": ["--threads", "1"],
        "probe": {"tokenizer": str(tiny_model_dir), "max_tokens": 8, "stop": ["<|im_end|>"]},
    }), encoding="utf-8")
    return path


def _train(manifest: Path, data: Path, out: Path, *extra: str) -> int:
    return main(["train", "--manifest", str(manifest), "--data", str(data), "--out", str(out), "--batch-size", "2",
                 "--learning-rate", "0.01", "--no-progress", *extra])


def test_sft_trains_merges_and_writes_a_servable_manifest(tmp_path: Path, base_manifest: Path, tiny_model_dir: Path,
                                                          capsys: pytest.CaptureFixture[str]):
    data = _write_jsonl(tmp_path / "sft.jsonl", _sft_rows())
    out = tmp_path / "trained"
    assert _train(base_manifest, data, out, "--method", "sft", "--max-steps", "6") == 0
    err = capsys.readouterr().err
    assert "step 6/6" in err and "s/step" in err and "ETA" in err and "userturn: trained tiny-sft-" in err

    info = json.loads((out / "training.json").read_text())
    assert info["result"]["steps"] == 6 and info["settings"]["method"] == "sft"
    assert info["data"]["rows"] == info["data"]["examples"] == 8
    import hashlib
    assert info["data"]["sha256"] == hashlib.sha256(data.read_bytes()).hexdigest()
    assert info["base"]["model"] == str(tiny_model_dir)
    assert info["result"]["final_loss"] < info["result"]["first_loss"]  # 8 identical targets: it learns them
    # the LoRA update is merged into the weights: a projection the adapter targeted has changed
    base_w, new_w = load_file(tiny_model_dir / "model.safetensors"), load_file(out / "model.safetensors")
    name = "model.layers.0.self_attn.q_proj.weight"
    assert set(new_w) == set(base_w) and not (new_w[name] == base_w[name]).all()

    manifest = load_manifest(out / "manifest.yaml")
    assert manifest.resolve_path(manifest.model) == str(out.resolve())
    assert manifest.request_model_name == info["model_name"] != "tiny"
    assert manifest.request_model_name.startswith("tiny-sft-")
    assert manifest.extra_args == ["--threads", "1"] and manifest.probe.max_tokens == 8  # base probe settings
    trained = manifest.probe.record_meta["trained"]
    assert trained["data_sha256"] == info["data"]["sha256"] and trained["base_model"] == str(tiny_model_dir)
    assert trained["settings"]["max_steps"] == 6 and trained["method"] == "sft"


def test_dpo_trains_on_preference_rows(tmp_path: Path, base_manifest: Path):
    rows = [{"id": f"p{i}", "prompt": r["messages"][:2], "chosen": [r["messages"][2]],
             "rejected": [{"role": "user", "content": r["messages"][0]["content"]}]}
            for i, r in enumerate(_sft_rows(6))]
    out = tmp_path / "dpo"
    assert _train(base_manifest, _write_jsonl(tmp_path / "pref.jsonl", rows), out, "--method", "dpo",
                  "--max-steps", "3") == 0
    info = json.loads((out / "training.json").read_text())
    assert info["result"]["steps"] == 3 and info["result"]["first_loss"] == pytest.approx(0.6931, abs=1e-3)
    assert load_manifest(out / "manifest.yaml").request_model_name.startswith("tiny-dpo-")


def test_data_sharing_items_with_the_evaluation_set_is_refused(tmp_path: Path, base_manifest: Path,
                                                               capsys: pytest.CaptureFixture[str]):
    data = _write_jsonl(tmp_path / "sft.jsonl", _sft_rows(4))
    held_out = _write_jsonl(tmp_path / "held-out.jsonl", [
        {"id": "t2", "messages": [{"role": "user", "content": "an unrelated question"}]}])
    out = tmp_path / "never"
    assert _train(base_manifest, data, out, "--method", "sft", "--eval-set", str(held_out)) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"userturn: error: {data}:3: item t2 is in the evaluation set held-out ({held_out}) "
                   "(held-out items are never trained on)")
    assert not out.exists()


def test_refusals_used_out_dir_and_untrainable_engine(tmp_path: Path, base_manifest: Path,
                                                      capsys: pytest.CaptureFixture[str]):
    data = _write_jsonl(tmp_path / "sft.jsonl", _sft_rows(2))
    used = tmp_path / "used"
    used.mkdir()
    (used / "x").write_text("keep me")
    assert _train(base_manifest, data, used, "--method", "sft") == 2
    assert "already exists and is not empty" in capsys.readouterr().err
    assert (used / "x").read_text() == "keep me"
    llama = tmp_path / "llama.yaml"
    llama.write_text("engine: llamacpp\nmodel: x.gguf\n")
    assert _train(llama, data, tmp_path / "o", "--method", "sft") == 2
    assert "engine 'llamacpp': train needs" in capsys.readouterr().err
    assert _train(base_manifest, data, tmp_path / "o", "--method", "sft", "--lora-r", "0") == 2
    assert "--lora-r: Input should be greater than or equal to 1" in capsys.readouterr().err


def test_progress_lines_show_step_loss_rate_and_eta():
    stream = io.StringIO()
    progress = RichProgress("train", live=False, every=2, stream=stream)
    state = SimpleNamespace(global_step=0, max_steps=4)
    progress.on_train_begin(None, state, None)
    for step in range(1, 5):
        state.global_step = step
        progress.on_log(None, state, None, logs={"loss": 3.0 - step * 0.5})
        progress.on_step_end(None, state, None)
    progress.on_train_end(None, state, None)
    lines = stream.getvalue().splitlines()
    assert [line.split(",")[0] for line in lines] == ["train: step 2/4", "train: step 4/4"]
    assert "loss 2.0000" in lines[0] and "s/step" in lines[0] and "ETA 0:" in lines[0]
    assert "loss 1.0000" in lines[1] and progress.losses[-1] == (4, 1.0)


@pytest.mark.slow
def test_records_probed_from_the_trained_model_carry_its_provenance(tmp_path: Path, base_manifest: Path):
    out = tmp_path / "trained"
    assert _train(base_manifest, _write_jsonl(tmp_path / "sft.jsonl", _sft_rows(2)), out, "--method", "sft",
                  "--max-steps", "1") == 0
    items = _write_jsonl(tmp_path / "items.jsonl", [
        {"id": "q1", "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}])
    results = tmp_path / "results.jsonl"
    assert main(["probe", "--manifest", str(out / "manifest.yaml"), "--dataset", str(items), "--out", str(results),
                 "--no-progress"]) == 0
    [record] = record_lines(results)
    info = json.loads((out / "training.json").read_text())
    assert record["status"] == "ok" and record["model"] == info["model_name"]
    assert record["meta"]["trained"]["tag"] == info["tag"]
    assert record["meta"]["trained"]["data_sha256"] == info["data"]["sha256"]
