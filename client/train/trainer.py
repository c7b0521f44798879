"""Fine-tune a causal LM with LoRA (TRL `SFTTrainer` / `DPOTrainer`) on the examples `client.train.data` tokenized,
then merge the adapters: the output is an ordinary transformers checkpoint any engine serves as is.

GPU when present (bfloat16 where supported), else CPU (float32). Needs `pip install 'userturn[train]'`.
"""

from __future__ import annotations

import importlib.util
import tempfile
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from userturn.client.train.data import DpoExample, SftExample
from userturn.core.errors import UserError

TRAIN_PACKAGES = ("trl", "peft", "accelerate", "datasets", "transformers", "torch")
DEFAULT_LEARNING_RATE = {"sft": 2e-4, "dpo": 5e-5}


def require_train_extra() -> None:
    """A one-line UserError when a package of the `train` extra is missing."""
    missing = [name for name in TRAIN_PACKAGES if importlib.util.find_spec(name) is None]
    if missing:
        raise UserError(f"training needs {', '.join(missing)}: pip install 'userturn[train]'")


class TrainSettings(BaseModel):
    """How to train; recorded in the output directory (training.json) and in every record probed from it."""

    model_config = ConfigDict(extra="forbid")

    method: Literal["sft", "dpo"]
    max_steps: int | None = Field(default=None, ge=1, description="stop after N optimizer steps (wins over epochs)")
    epochs: float = Field(default=1.0, gt=0)
    lora_r: int = Field(default=16, ge=1)
    lora_alpha: int | None = Field(default=None, ge=1, description="default 2 x lora_r")
    lora_dropout: float = Field(default=0.0, ge=0, lt=1)
    learning_rate: float | None = Field(default=None, gt=0, description="default 2e-4 (sft), 5e-5 (dpo)")
    seed: int = 0
    batch_size: int = Field(default=1, ge=1, description="1: no padding (fastest per example on a CPU)")
    grad_accum: int = Field(default=1, ge=1)
    max_length: int = Field(default=384, ge=8, description="tokens per example; longer prompts are cut on the left")
    beta: float = Field(default=0.1, gt=0, description="DPO temperature")
    threads: int | None = Field(default=None, ge=1, description="torch CPU threads (default: torch's choice)")

    @model_validator(mode="after")
    def _defaults(self) -> TrainSettings:
        if self.lora_alpha is None:
            self.lora_alpha = 2 * self.lora_r
        if self.learning_rate is None:
            self.learning_rate = DEFAULT_LEARNING_RATE[self.method]
        return self


class BaseModelSource(BaseModel):
    """Where the base weights and the serving tokenizer are (as the CPU engine loads them)."""

    model: str = Field(description="directory or hub id (for a GGUF file: its directory)")
    gguf_file: str | None = Field(default=None, description="file name inside `model` (GGUF weights, dequantised)")
    tokenizer: str = Field(description="tokenizer directory or hub id")
    revision: str | None = None
    trust_remote_code: bool = False


class TrainResult(BaseModel):
    steps: int
    train_seconds: float
    seconds_per_step: float | None
    load_seconds: float
    save_seconds: float
    first_loss: float | None
    final_loss: float | None
    losses: list[tuple[int, float]]
    device: str
    dtype: str
    trainable_parameters: int
    total_parameters: int


def load_tokenizer(source: BaseModelSource) -> Any:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(source.tokenizer, revision=source.revision,
                                              trust_remote_code=source.trust_remote_code)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def encoder(tokenizer: Any) -> Any:
    """`client.train.data.Encoder` over a transformers tokenizer."""
    def encode(text: str, *, add_special_tokens: bool) -> list[int]:
        return list(tokenizer(text, add_special_tokens=add_special_tokens)["input_ids"])
    return encode


def _training_args(settings: TrainSettings, output_dir: str, on_gpu: bool, bf16: bool) -> dict[str, Any]:
    args: dict[str, Any] = {
        "output_dir": output_dir, "per_device_train_batch_size": settings.batch_size,
        "gradient_accumulation_steps": settings.grad_accum, "learning_rate": settings.learning_rate,
        "num_train_epochs": settings.epochs, "max_steps": settings.max_steps or -1, "seed": settings.seed,
        "data_seed": settings.seed, "logging_steps": 1, "save_strategy": "no", "report_to": [],
        "disable_tqdm": True, "use_cpu": not on_gpu, "bf16": bf16, "dataloader_num_workers": 0,
        "lr_scheduler_type": "linear", "warmup_steps": 0, "max_length": settings.max_length,
        # TRL's default activation checkpointing costs ~1/3 more time: only GPUs, where bigger models train, need it
        "gradient_checkpointing": on_gpu,
        # SFT batches of similar lengths: less padding (DPO rows have no `input_ids` for the length sampler)
        "train_sampling_strategy": "group_by_length" if settings.batch_size > 1 and settings.method == "sft"
        else "random",
    }
    if settings.method == "dpo":
        args["beta"] = settings.beta
    else:
        args["completion_only_loss"] = True  # labels = input ids where completion_mask is 1, else -100
    return args


def train(source: BaseModelSource, examples: Sequence[SftExample | DpoExample], settings: TrainSettings,
          out_dir: Path, *, tokenizer: Any = None, callbacks: Sequence[Any] = ()) -> TrainResult:
    """LoRA-train the base model on `examples`, merge the adapters and save model + tokenizer into `out_dir`."""
    require_train_extra()
    with warnings.catch_warnings():  # transformers/TRL deprecation notices about their own internals
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", UserWarning)
        return _train(source, examples, settings, out_dir, tokenizer, callbacks)


def _train(source: BaseModelSource, examples: Sequence[SftExample | DpoExample], settings: TrainSettings,
           out_dir: Path, tokenizer: Any, callbacks: Sequence[Any]) -> TrainResult:
    import torch
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # weight loading and shard writing: the progress callback reports instead

    if not examples:
        raise UserError("no training examples (every row was dropped: see max_length)")
    if settings.threads:
        torch.set_num_threads(settings.threads)
    on_gpu = torch.cuda.is_available()
    bf16 = on_gpu and torch.cuda.is_bf16_supported()
    dtype = torch.bfloat16 if bf16 else torch.float32
    started = time.monotonic()
    tokenizer = tokenizer if tokenizer is not None else load_tokenizer(source)
    try:
        model = AutoModelForCausalLM.from_pretrained(source.model, dtype=dtype, revision=source.revision,
                                                     trust_remote_code=source.trust_remote_code,
                                                     gguf_file=source.gguf_file)
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot load the base model {source.model}: {str(exc).splitlines()[0]}") from None
    if source.gguf_file:
        _drop_gguf_quantizer(model, source)
    load_seconds = time.monotonic() - started
    from transformers import set_seed

    set_seed(settings.seed)  # the LoRA initialisation and the data order
    lora = LoraConfig(r=settings.lora_r, lora_alpha=settings.lora_alpha or 2 * settings.lora_r,
                      lora_dropout=settings.lora_dropout, target_modules="all-linear", task_type="CAUSAL_LM")
    import datasets

    datasets.disable_progress_bars()  # TRL's map/filter passes over a few rows: no bars
    dataset = datasets.Dataset.from_list([e.model_dump() for e in examples])
    with tempfile.TemporaryDirectory(prefix="userturn-train-") as scratch:
        args = _training_args(settings, scratch, on_gpu, bf16)
        from trl import DPOConfig, SFTConfig, SFTTrainer

        trainer_class: Any = SFTTrainer if settings.method == "sft" else _pretokenized_dpo()
        config = SFTConfig(**args) if settings.method == "sft" else DPOConfig(**args)
        trainer = trainer_class(model=model, args=config, train_dataset=dataset, processing_class=tokenizer,
                                peft_config=lora, callbacks=list(callbacks))
        from transformers.trainer_callback import PrinterCallback, ProgressCallback

        for quiet in (PrinterCallback, ProgressCallback):  # the progress callbacks passed in report instead
            trainer.remove_callback(quiet)
        peft_model: Any = trainer.model
        trainable = sum(p.numel() for p in peft_model.parameters() if p.requires_grad)
        total = sum(p.numel() for p in peft_model.parameters())
        train_started = time.monotonic()
        trainer.train()
        train_seconds = time.monotonic() - train_started
        steps = int(trainer.state.global_step)
        losses = [(int(h["step"]), float(h["loss"])) for h in trainer.state.log_history if "loss" in h]
        save_started = time.monotonic()
        merged = peft_model.merge_and_unload()
        merged = merged.to(torch.float32)  # served on CPU in float32; a GPU engine casts as its manifest says
        out_dir.mkdir(parents=True, exist_ok=True)
        merged.save_pretrained(str(out_dir), safe_serialization=True)
        tokenizer.save_pretrained(str(out_dir))
        save_seconds = time.monotonic() - save_started
    return TrainResult(
        steps=steps, train_seconds=round(train_seconds, 2),
        seconds_per_step=round(train_seconds / steps, 3) if steps else None, load_seconds=round(load_seconds, 2),
        save_seconds=round(save_seconds, 2), first_loss=losses[0][1] if losses else None,
        final_loss=losses[-1][1] if losses else None, losses=losses, device="cuda" if on_gpu else "cpu",
        dtype=str(dtype).removeprefix("torch."), trainable_parameters=trainable, total_parameters=total,
    )


def _drop_gguf_quantizer(model: Any, source: BaseModelSource) -> None:
    """Drop the quantized mark transformers leaves on a GGUF model loaded dequantised (it refuses to train one), so
    the saved checkpoint is an ordinary one; UserError if a weight is still quantized."""
    if not all(p.is_floating_point() for p in model.parameters()):
        raise UserError(f"{source.model}/{source.gguf_file}: transformers kept the GGUF weights quantized; training "
                        "needs them dequantized (uninstall `kernels`, or train from a safetensors checkpoint)")
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:
        quantizer.remove_quantization_config(model)
    for module in model.modules():
        if getattr(getattr(module, "config", None), "_is_quantized", False):
            module.config._is_quantized = False


def _pretokenized_dpo() -> type:
    """`DPOTrainer` fed `prompt_ids` / `chosen_ids` / `rejected_ids` as rendered here (it would re-render them)."""
    from trl import DPOTrainer

    class PretokenizedDPOTrainer(DPOTrainer):
        def _prepare_dataset(self, dataset: Any, processing_class: Any, args: Any, dataset_name: str) -> Any:
            return dataset

    return PretokenizedDPOTrainer
