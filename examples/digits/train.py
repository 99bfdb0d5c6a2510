"""Train a handwritten-digit classifier on scikit-learn's bundled digits data set.

The example training job of GPU Portal. It follows the portal's job environment
contract (see README.md): TensorBoard scalars go to $TENSORBOARD_LOG_DIR, the
model to $PORTAL_OUTPUT_DIR/model.joblib, and WORLD_SIZE > 1 trains one shard of
the data per rank. It checkpoints to $PORTAL_CHECKPOINT_DIR after every epoch and
on SIGTERM, and a re-run after a preemption resumes from there.

Run it locally with:  python train.py --epochs 5
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import joblib
import numpy as np
import sklearn
from sklearn.datasets import load_digits
from sklearn.linear_model import SGDClassifier
from sklearn.metrics import accuracy_score, log_loss
from sklearn.model_selection import train_test_split
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import MinMaxScaler
from tensorboardX import SummaryWriter

CLASSES = np.arange(10)
PIXEL_MAX = 16.0  # the digits images are 8x8 pixels with values 0..16
TEST_SIZE = 0.25
SCALARS = ("loss/train", "accuracy/train", "accuracy/test", "time/epoch_seconds")
# Touched after each complete checkpoint: the portal counts a preempted run's lost GPU-time from its mtime.
MARKER = ".portal-checkpoint"
SUMMARY = "train-summary.json"  # in PORTAL_OUTPUT_DIR: what this run trained, for people and tests

stop_requested = threading.Event()  # set by SIGTERM (the portal's cancel) or SIGINT (Ctrl-C)
stop_signal: list[str] = []


def log(message: str, rank: int, world_size: int) -> None:
    prefix = f"[rank {rank}] " if world_size > 1 else ""
    print(prefix + message, flush=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=20, help="passes over the training data (default 20)")
    parser.add_argument("--lr", type=float, default=0.05, help="SGD learning rate, constant (default 0.05)")
    parser.add_argument("--alpha", type=float, default=1e-4, help="L2 regularisation strength (default 1e-4)")
    parser.add_argument("--batch-size", type=int, default=128, help="samples per step (default 128)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the train/test split and shuffling (default 0)")
    parser.add_argument(
        "--sleep-per-epoch",
        type=float,
        default=0.0,
        help="seconds to pause per epoch, spread over its steps, to make a demo run last (default 0)",
    )
    parser.add_argument(
        "--shard-timeout",
        type=float,
        default=600.0,
        help="with WORLD_SIZE > 1: how long rank 0 waits for the other ranks' shards (default 600 s)",
    )
    args = parser.parse_args(argv)
    if args.epochs < 1 or args.batch_size < 1 or args.lr <= 0 or args.sleep_per_epoch < 0:
        parser.error("--epochs and --batch-size must be >= 1, --lr > 0 and --sleep-per-epoch >= 0")
    return args


def load_data(seed: int):
    """The fixed train/test split: (X_train, X_test, y_train, y_test), raw pixel values 0..16."""
    X, y = load_digits(return_X_y=True)
    return train_test_split(X, y, test_size=TEST_SIZE, random_state=seed, stratify=y)


def shard(X: np.ndarray, y: np.ndarray, rank: int, world_size: int):
    """This rank's rows of the training data: rows i with i % WORLD_SIZE == RANK."""
    rows = np.arange(len(y)) % world_size == rank
    return X[rows], y[rows]


def new_model(args: argparse.Namespace) -> Pipeline:
    # The scaler is fitted on the known pixel range, not on data, so that every
    # rank scales the same way and the saved model takes raw digits images.
    scaler = MinMaxScaler().fit(np.array([[0.0] * 64, [PIXEL_MAX] * 64]))
    classifier = SGDClassifier(
        loss="log_loss",
        learning_rate="constant",
        eta0=args.lr,
        alpha=args.alpha,
        shuffle=False,  # train.py shuffles each epoch itself, reproducibly
        random_state=args.seed,
    )
    return Pipeline([("scale", scaler), ("classifier", classifier)])


def config_of(args: argparse.Namespace, world_size: int) -> dict:
    """What must match for a checkpoint or a shard to belong to this run."""
    return {
        "epochs": args.epochs,
        "lr": args.lr,
        "alpha": args.alpha,
        "batch_size": args.batch_size,
        "seed": args.seed,
        "world_size": world_size,
    }


def dump_atomically(obj, path: Path) -> None:
    """Write a joblib file so that a reader never sees half of it, and a crash right after loses none of it."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with tmp.open("wb") as file:
        joblib.dump(obj, file)
        file.flush()
        os.fsync(file.fileno())
    os.replace(tmp, path)
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)  # the rename itself survives a crash only once the folder is synced
    finally:
        os.close(folder)


def save_checkpoint(state: dict, path: Path, rank: int) -> None:
    """The checkpoint, then (rank 0) the marker: a marker never promises a checkpoint that is not complete."""
    dump_atomically(state, path)
    if rank == 0:
        marker = path.parent / MARKER
        marker.write_text(json.dumps({"epoch": state["epoch"], "step": state["step"], "at": time.time()}) + "\n")


def checkpoint_path(output_dir: Path, rank: int) -> Path:
    return output_dir / ("checkpoint.joblib" if rank == 0 else f"checkpoint-{rank}.joblib")


def shard_path(output_dir: Path, rank: int) -> Path:
    return output_dir / f"shard-{rank}.joblib"


def interruptible_sleep(seconds: float) -> None:
    if seconds > 0:
        stop_requested.wait(seconds)


def on_signal(signum, frame) -> None:
    # Only set a flag: printing here could re-enter a print the main code is in.
    stop_signal.append(signal.Signals(signum).name)
    stop_requested.set()


def wait_for_shards(output_dir: Path, config: dict, world_size: int, timeout: float) -> list[dict] | None:
    """Rank 0: the other ranks' parameters, once each has written its shard; None if stopped."""
    deadline = time.monotonic() + timeout
    found: dict[int, dict] = {}
    while True:
        for rank in range(1, world_size):
            path = shard_path(output_dir, rank)
            if rank not in found and path.exists():
                shard_data = joblib.load(path)
                if shard_data.get("config") == config:
                    found[rank] = shard_data
        if len(found) == world_size - 1:
            return [found[rank] for rank in sorted(found)]
        if stop_requested.is_set():
            return None
        if time.monotonic() > deadline:
            missing = sorted(set(range(1, world_size)) - set(found))
            raise SystemExit(f"rank 0: no shard from rank(s) {missing} in {output_dir} after {timeout:.0f} s")
        stop_requested.wait(0.2)


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    args = parse_args(argv)

    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if not 0 <= rank < world_size:
        raise SystemExit(f"RANK={rank} is not within WORLD_SIZE={world_size}")
    output_dir = Path(os.environ.get("PORTAL_OUTPUT_DIR") or "output")
    # The portal keeps PORTAL_CHECKPOINT_DIR across a job's runs (PORTAL_OUTPUT_DIR is the run's own).
    checkpoint_dir = Path(os.environ.get("PORTAL_CHECKPOINT_DIR") or output_dir)
    run_index = int(os.environ.get("PORTAL_RUN_INDEX") or "0")
    resumed_run = os.environ.get("PORTAL_RESUMED") == "1"
    log_dir = Path(os.environ.get("TENSORBOARD_LOG_DIR") or "runs") / f"worker-{rank}"
    for folder in (output_dir, checkpoint_dir, log_dir):
        folder.mkdir(parents=True, exist_ok=True)
    config = config_of(args, world_size)

    def say(message: str) -> None:
        log(message, rank, world_size)

    X_train, X_test, y_train, y_test = load_data(args.seed)
    X_shard, y_shard = shard(X_train, y_train, rank, world_size)
    job = os.environ.get("PORTAL_JOB_NAME") or os.environ.get("PORTAL_JOB_ID") or "local run"
    say(
        f"{job}: digits, {len(y_shard)} training samples (shard {rank} of {world_size}), "
        f"{len(y_test)} test samples, {args.epochs} epochs, lr {args.lr}; "
        f"TensorBoard: {log_dir}, output: {output_dir}, checkpoints: {checkpoint_dir}; "
        f"run {run_index}{' (resumed after a preemption)' if resumed_run else ''}"
    )

    # Resume from this rank's checkpoint when one exists for the same configuration.
    model = new_model(args)
    epochs_done, step_in_epoch = 0, 0
    ckpt = checkpoint_path(checkpoint_dir, rank)
    if ckpt.exists():
        state = joblib.load(ckpt)
        if state.get("config") == config:
            model, epochs_done, step_in_epoch = state["model"], state["epoch"], state["step"]
            say(f"resumed from checkpoint {ckpt} at epoch {epochs_done}/{args.epochs}, step {step_in_epoch}")
        else:
            say(f"ignoring checkpoint {ckpt}: it was written with other settings {state.get('config')}")
    epochs_at_start = epochs_done

    def summarize() -> None:
        """Say and write down how many epochs this run trained, and how many the job has in total."""
        trained = epochs_done - epochs_at_start
        say(f"trained {trained} epoch{'s' if trained != 1 else ''} in this run, {epochs_done}/{args.epochs} in total")
        summary = {
            "rank": rank,
            "run_index": run_index,
            "resumed": resumed_run,
            "epochs_this_run": trained,
            "epochs_total": epochs_done,
            "epochs": args.epochs,
            "finished": epochs_done == args.epochs,
        }
        name = SUMMARY if rank == 0 else f"train-summary-{rank}.json"
        (output_dir / name).write_text(json.dumps(summary, indent=2) + "\n")

    scaler, classifier = model.named_steps["scale"], model.named_steps["classifier"]
    Xs_shard, Xs_test = scaler.transform(X_shard), scaler.transform(X_test)

    # tensorboardX names event files by the second; the suffix keeps the file of a run
    # resumed within the same second apart from, and sorted after, the earlier one's.
    writer = SummaryWriter(str(log_dir), filename_suffix=f".{time.time_ns()}.{os.getpid()}")
    steps_per_epoch = -(-len(y_shard) // args.batch_size)
    pause = args.sleep_per_epoch / steps_per_epoch
    try:
        while epochs_done < args.epochs and not stop_requested.is_set():
            epoch = epochs_done + 1
            started = time.monotonic()
            # The order of each epoch depends only on the seed, rank and epoch, so a
            # resumed run continues with exactly the steps the stopped one had left.
            order = np.random.default_rng([args.seed, rank, epoch]).permutation(len(y_shard))
            while step_in_epoch < steps_per_epoch and not stop_requested.is_set():
                rows = order[step_in_epoch * args.batch_size : (step_in_epoch + 1) * args.batch_size]
                classifier.partial_fit(Xs_shard[rows], y_shard[rows], classes=CLASSES)
                step_in_epoch += 1
                interruptible_sleep(pause)
            if step_in_epoch < steps_per_epoch:
                break  # stopped within this epoch
            epoch_seconds = time.monotonic() - started
            epochs_done, step_in_epoch = epoch, 0
            scalars = {
                "loss/train": log_loss(y_shard, classifier.predict_proba(Xs_shard), labels=CLASSES),
                "accuracy/train": accuracy_score(y_shard, classifier.predict(Xs_shard)),
                "accuracy/test": accuracy_score(y_test, classifier.predict(Xs_test)),
                "time/epoch_seconds": epoch_seconds,
            }
            for tag, value in scalars.items():
                writer.add_scalar(tag, float(value), epoch)
            writer.flush()  # so that TensorBoard shows each epoch while the job runs
            if epochs_done < args.epochs:
                # Every epoch, so that a preemption without a grace period (SIGKILL, a lost node) loses one at most.
                save_checkpoint({"config": config, "model": model, "epoch": epochs_done, "step": 0}, ckpt, rank)
            say(
                f"epoch {epoch}/{args.epochs}  train loss {scalars['loss/train']:.4f}  "
                f"train acc {scalars['accuracy/train']:.4f}  test acc {scalars['accuracy/test']:.4f}  "
                f"time {epoch_seconds:.2f}s"
            )

        if epochs_done == args.epochs and rank > 0:
            dump_atomically(
                {
                    "config": config,
                    "rank": rank,
                    "n_samples": len(y_shard),
                    "coef": classifier.coef_,
                    "intercept": classifier.intercept_,
                },
                shard_path(output_dir, rank),
            )
            say(f"wrote {shard_path(output_dir, rank)} for rank 0 to average")

        shards = []
        if epochs_done == args.epochs and rank == 0 and world_size > 1:
            others = world_size - 1
            say(f"waiting up to {args.shard_timeout:.0f} s for the other {others} rank(s) to write their shards")
            shards = wait_for_shards(output_dir, config, world_size, args.shard_timeout)

        if stop_requested.is_set() and (epochs_done < args.epochs or shards is None):
            say(f"received {stop_signal[0]}: saving a checkpoint")
            save_checkpoint({"config": config, "model": model, "epoch": epochs_done, "step": step_in_epoch}, ckpt, rank)
            say(f"checkpoint written to {ckpt} at epoch {epochs_done}/{args.epochs}, step {step_in_epoch}; exiting")
            summarize()
            return 0

        if rank == 0:
            own_accuracy = accuracy_score(y_test, model.predict(X_test))
            if shards:
                # One-shot parameter averaging, weighted by shard size.
                weights = np.array([len(y_shard)] + [s["n_samples"] for s in shards], dtype=float)
                weights /= weights.sum()
                classifier.coef_ = sum(w * c for w, c in zip(weights, [classifier.coef_] + [s["coef"] for s in shards]))
                classifier.intercept_ = sum(
                    w * i for w, i in zip(weights, [classifier.intercept_] + [s["intercept"] for s in shards])
                )
            test_accuracy = accuracy_score(y_test, model.predict(X_test))
            if shards:
                writer.add_scalar("accuracy/test_averaged", float(test_accuracy), args.epochs)
                say(
                    f"averaged the parameters of {world_size} ranks: test acc {test_accuracy:.4f} "
                    f"(rank 0 alone: {own_accuracy:.4f})"
                )
            metrics = {
                "test_accuracy": test_accuracy,
                "test_samples": len(y_test),
                "train_samples": len(y_train),
                "epochs": args.epochs,
                "world_size": world_size,
                "rank0_test_accuracy": own_accuracy,
                "config": config,
                "scikit_learn": sklearn.__version__,
            }
            dump_atomically(model, output_dir / "model.joblib")
            (output_dir / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
            say(f"saved {output_dir / 'model.joblib'} (test accuracy {test_accuracy:.4f}) and metrics.json")
        ckpt.unlink(missing_ok=True)
        summarize()
        return 0
    finally:
        writer.close()


if __name__ == "__main__":
    sys.exit(main())
