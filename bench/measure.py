"""The benchmark's measurements of one trainer, in the order ``throughput.py`` takes them: the
input alone, the model's counts, the first step, the timed steps, K steps in one call, a
profile, evaluation, MFU and memory. Each says its figures in one line (``say``) and returns
them as fields of the JSON result; what differs between the Keras backends comes in through the
engine (``engines.py``).
"""

from __future__ import annotations

import math
import resource
import statistics
import time
from pathlib import Path

from flops import keras_model_flops
from peaks import mfu
from timing import measure_matmul, rounded, summarize, time_each


def say(line: str) -> None:
    """One line of the report, at once (the JSON result is the last stdout line)."""
    print(line, flush=True)


def measure_input_pipeline(args, eng, data_path: str) -> dict:
    """Images/s of the training input alone (the backend's: tf.data on TensorFlow, the on-device
    batch maker on JAX), over --input_batches."""
    rate, how = eng.input_rate(data_path, args.input_batches)
    say(f"input alone: {rate:.1f} images/s ({how})")
    return {"input_images_per_s": round(rate, 1)}


def count_model(model) -> dict:
    """Parameter and layer counts, and the forward FLOPs per image read off the Keras layers."""
    from resnet_noBN.models.networks import param_counts

    return {**param_counts(model), "keras_forward_flops_per_image": keras_model_flops(model)}


def measure_first_step(args, trainer, iterator) -> dict:
    """Seconds of the first step (trace + compile + one step); then the --warmup steps."""
    t0 = time.perf_counter()
    trainer.run_steps(iterator, 1)
    seconds = round(time.perf_counter() - t0, 3)
    say(f"first step (trace + compile + 1 step): {seconds} s")
    for _ in range(args.warmup):
        trainer.run_steps(iterator, 1)
    return {"first_step_s": seconds}


def time_steps(trainer, iterator, steps: int) -> tuple[list[float], list[float]]:
    """(wall, CPU) seconds of ``steps`` steps, each its own ``run_steps`` call, which returns
    the loss, so the step has finished; RuntimeError where the loss is not finite."""
    wall, cpu_seconds, loss_sum = time_each(lambda: trainer.run_steps(iterator, 1)["loss"], steps)
    if not math.isfinite(loss_sum):
        raise RuntimeError(f"the loss is {loss_sum}: the benchmark's training diverged")
    return wall, cpu_seconds


def measure_training(args, trainer, iterator, flops: dict) -> tuple[dict, list[float]]:
    """s/step (median and spread over --steps), images/s, FLOP/s and CPU s/step; and the times."""
    times, cpu_seconds = time_steps(trainer, iterator, args.steps)
    train = summarize(times)
    images = args.batch_size
    flops_per_s = flops["train_flops_per_image"] * images / train["median"]
    result = {
        # CPU seconds of this process per step (all threads, spin-waiting included): less
        # sensitive than wall time to other processes on the machine, not a speed by itself.
        "train_cpu_s_per_step": round(statistics.median(cpu_seconds), 4),
        "train_s_per_step": rounded(train),
        "train_images_per_s": round(images / train["median"], 2),
        "train_flops_per_s": round(flops_per_s),
    }
    say(
        f"train: {train['median']:.4f} s/step median (p10 {train['p10']:.4f}, p90 "
        f"{train['p90']:.4f}, min {train['min']:.4f}, max {train['max']:.4f}; {args.steps} "
        f"steps after {args.warmup} warm-up); {result['train_images_per_s']} images/s; "
        f"{flops_per_s / 1e9:.1f} GFLOP/s; {result['train_cpu_s_per_step']} CPU s/step"
    )
    return result, times


def measure_chunk(args, trainer, iterator) -> dict:
    """s/step of --chunk_steps steps in one ``run_steps`` call (no host wake-up per step)."""
    t0 = time.perf_counter()
    trainer.run_steps(iterator, args.chunk_steps)
    per_step = (time.perf_counter() - t0) / args.chunk_steps
    result = {
        "chunk_steps": args.chunk_steps,
        "chunk_s_per_step": round(per_step, 5),
        "chunk_images_per_s": round(args.batch_size / per_step, 2),
    }
    say(
        f"train, {args.chunk_steps} steps in one call: {per_step:.4f} s/step, "
        f"{result['chunk_images_per_s']} images/s"
    )
    return result


def profile(args, eng, trainer, iterator) -> dict:
    """A profiler trace (tf.profiler or jax.profiler) of --profile_steps steps (one call) into
    --profile_dir."""
    with eng.profile(args.profile_dir):
        trainer.run_steps(iterator, args.profile_steps)
    say(
        f"profile of {args.profile_steps} steps: {args.profile_dir} "
        f"(tensorboard --logdir {args.profile_dir}, Profile tab)"
    )
    if not args.kernel_summary:
        return {"profile_dir": args.profile_dir}
    from kernels import summarize

    try:
        text, rows = summarize(args.profile_dir, args.profile_steps)
    except FileNotFoundError as e:  # a profiler that writes no trace viewer file (torch's)
        say(f"no kernel summary: {e}")
        return {"profile_dir": args.profile_dir, "kernel_summary": {"error": str(e)}}
    Path(args.kernel_summary).parent.mkdir(parents=True, exist_ok=True)
    Path(args.kernel_summary).write_text(text)
    say(f"top kernels by time in {args.kernel_summary}:\n" + "\n".join(text.splitlines()[:8]))
    return {
        "profile_dir": args.profile_dir,
        "kernel_summary": {"file": args.kernel_summary, "top": [r[:1] + r[2:] for r in rows[:5]]},
    }


def measure_loss(args, trainer, iterator) -> dict:
    """The training loss of step --loss_at_step, counted from the first (the compile) step, after
    the first step and the warm-up: two runs of the same flags and --seed train on the same
    batches from the same weights, so a change that keeps the arithmetic gives the same loss
    within its rounding (the lease checks a speed-up this way)."""
    done = 1 + args.warmup
    if args.loss_at_step > done + 1:
        trainer.run_steps(iterator, args.loss_at_step - done - 1)
    metrics = trainer.run_steps(iterator, 1)
    loss = float(metrics["loss"])
    result = {"loss_step": args.loss_at_step, "loss_at_step": round(loss, 6)}
    say(f"loss of step {args.loss_at_step}: {loss:.5f}")
    return result


def measure_evaluation(args, eng, trainer, data_path: str, flops: dict) -> dict:
    """Images/s and FLOP/s of ``trainer.evaluate`` over --eval_batches, after one (the trace)."""
    trainer.evaluate(eng.eval_source(data_path, 1))  # trace
    source = eng.eval_source(data_path, args.eval_batches)
    t0 = time.perf_counter()
    images = trainer.evaluate(source)["test_examples"]
    seconds = time.perf_counter() - t0
    result = {
        "eval_images_per_s": round(images / seconds, 1),
        "eval_flops_per_s": round(flops["forward_flops_per_image"] * images / seconds),
    }
    say(
        f"eval: {result['eval_images_per_s']} images/s ({images} images in batches of "
        f"{args.eval_batch_size}); {result['eval_flops_per_s'] / 1e9:.1f} GFLOP/s"
    )
    return result


def measure_mfu(args, dev: dict, flops: dict, measured: dict) -> dict:
    """The training FLOP/s in ``measured`` as a fraction of the device's peak (MFU), of a timed
    matmul (--measure_matmul), and for the --chunk_steps call."""
    achieved = measured["train_flops_per_s"]
    peak, precision = dev["peak"], dev["peak_precision"]
    matmul_precision = precision if precision == "bfloat16" else "float32"
    result = {}
    if args.measure_matmul:
        rate = measure_matmul(matmul_precision, n=8192 if dev["device"] == "gpu" else 2048)
        result["matmul_flops_per_s"] = round(rate)
        result["mfu_vs_matmul"] = round(achieved / rate, 4)
    result.update(
        peak_flops_per_s=peak["flops_per_s"],
        peak_precision=precision,
        peak_source=peak["source"],
        mfu=mfu(achieved, peak),
    )
    if args.chunk_steps and peak["flops_per_s"]:  # the launcher's way: no host sync per step
        result["chunk_mfu"] = mfu(
            flops["train_flops_per_image"] * measured["chunk_images_per_s"], peak
        )
    say(
        f"achieved {achieved / 1e9:.1f} GFLOP/s training; peak "
        + (
            f"{peak['flops_per_s'] / 1e9:.1f} GFLOP/s ({peak['source']}): MFU {result['mfu']:.3f}"
            if peak["flops_per_s"]
            else f"unknown ({peak['source']})"
        )
        + (
            f"; measured {matmul_precision} matmul {result['matmul_flops_per_s'] / 1e9:.1f} "
            f"GFLOP/s (step = {result['mfu_vs_matmul']:.3f} of it)"
            if args.measure_matmul
            else ""
        )
        + (
            f"; {args.chunk_steps} steps in one call: MFU {result['chunk_mfu']:.3f}"
            if "chunk_mfu" in result
            else ""
        )
    )
    if dev["device"] == "cpu" and result["mfu"] and result["mfu"] > 1:
        say(
            "note: MFU > 1 against the stated peak: the cores run above the clock it assumes "
            "(boost); pass --cpu_clock_ghz with the real clock (docs/speed.md)"
        )
    return result


def measure_memory(eng) -> dict:
    """Peak host RSS, and the GPU's peak memory where there is one (MiB)."""
    result = {
        "peak_host_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    }
    if eng.device == "gpu":
        result["peak_gpu_memory_mib"] = round(eng.gpu_peak_mib(), 1)
    say(
        f"peak host RSS {result['peak_host_rss_mib']} MiB"
        + (
            f"; peak GPU memory {result['peak_gpu_memory_mib']} MiB"
            if "peak_gpu_memory_mib" in result
            else ""
        )
    )
    return result
