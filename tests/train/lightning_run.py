"""Lightning on a PackedDataset with Lightning's defaults (use_distributed_sampler=True), run by
tests/train/test_lightning.py as a script (Lightning's DDP launcher re-runs this file per rank).

    python tests/train/lightning_run.py BUILD OUT DEVICES STEPS BATCH EVERY [CKPT]

Each rank writes OUT/rank{r}.pt: the input_ids and epoch of every batch it trained on, and the
final weights. A ModelCheckpoint saves every EVERY steps into OUT/ckpt (step=N.ckpt). With CKPT,
the run resumes from it (``fit(ckpt_path=CKPT)``); the run spans epochs when STEPS passes one.
"""

from __future__ import annotations

import os
import sys

import lightning.pytorch as pl
import torch
import torch.nn.functional as F

from packer import PackedDataset, PackedLoader, PackedSampler


class Tiny(pl.LightningModule):
    def __init__(self, vocab: int):
        super().__init__()
        torch.manual_seed(0)
        self.emb = torch.nn.Embedding(vocab, 16)
        self.out = torch.nn.Linear(16, vocab)
        self.seen: list[torch.Tensor] = []

    def training_step(self, batch, i):
        self.seen.append((self.current_epoch, batch["input_ids"].clone()))
        logits = self.out(self.emb(batch["input_ids"]))
        return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), batch["labels"][:, 1:].reshape(-1),
                               ignore_index=-100)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class Data(pl.LightningDataModule):
    def __init__(self, path: str, batch: int):
        super().__init__()
        self.path, self.batch = path, batch

    def train_dataloader(self):
        ds = PackedDataset(self.path)
        # no rank/world_size: PackedSampler reads them from the process group Lightning made
        return PackedLoader(ds, batch_size=self.batch, sampler=PackedSampler(ds, seed=0))


def main(build: str, out: str, devices: int, steps: int, batch: int, every: int, ckpt: str | None) -> None:
    ds = PackedDataset(build)
    model = Tiny(ds.vocab_size)
    every = pl.callbacks.ModelCheckpoint(dirpath=os.path.join(out, "ckpt"), every_n_train_steps=every, save_top_k=-1,
                                         filename="{step}")
    trainer = pl.Trainer(accelerator="cpu", devices=devices, strategy="ddp" if devices > 1 else "auto",
                         max_steps=steps, callbacks=[every], logger=False, enable_progress_bar=False,
                         enable_model_summary=False)
    trainer.fit(model, datamodule=Data(build, batch), ckpt_path=ckpt)
    r = trainer.global_rank
    os.makedirs(out, exist_ok=True)
    torch.save({"seen": model.seen, "world": trainer.world_size,
                "state": {k: v.detach().clone() for k, v in model.state_dict().items()}},
               os.path.join(out, f"rank{r}.pt"))


if __name__ == "__main__":
    a = sys.argv[1:]
    main(a[0], a[1], int(a[2]), int(a[3]), int(a[4]), int(a[5]), a[6] if len(a) > 6 else None)
