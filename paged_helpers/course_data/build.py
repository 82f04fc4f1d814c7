"""Make the course's built data files from its sources, the same bytes on every machine.

Sources (written by hand, in data/): ``corpus.txt`` and ``prompts.json``; the published request
statistics below. Built (by ``build``): the tiny Qwen3 checkpoint, its vocabulary, the
request-length traces, and ``SHA256SUMS`` over all of them.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from pathlib import Path

from ..checkpoint import save_qwen3
from ..model import random_qwen3, tiny_config
from ..words import build_vocabulary, split_words
from . import CHECKSUMS, TINY_QWEN3

PAPER = (
    "Kwon et al., 'Efficient Memory Management for Large Language Model Serving with PagedAttention', "
    "SOSP 2023, section 6.1 and Figure 11 (input and output lengths of the ShareGPT and Alpaca traces)"
)
# Mean lengths in tokens as that paper reports them; the spreads (sigma of a log-normal) are the
# course's own choice, giving the long right tail the paper's histograms show, not measured values.
TRACES = {
    "sharegpt": {"mean_input_tokens": 161.31, "mean_output_tokens": 337.99, "sigma_input": 1.0, "sigma_output": 1.0},
    "alpaca": {"mean_input_tokens": 19.31, "mean_output_tokens": 58.45, "sigma_input": 0.6, "sigma_output": 0.9},
}
TRACE_REQUESTS = 1000
# The paper's models serve at most 2048 tokens per sequence: longer draws are redrawn, and a
# static-slot server must reserve this much for every request.
MAX_TOTAL_TOKENS = 2048
TRACE_SEED = 0
MODEL_SEED = 0


def prompt_texts(prompts: dict) -> list[str]:
    """Every text in prompts.json, in file order."""
    return [prompts["system_prompt"], *prompts["questions"], prompts["fork_prompt"], *prompts["examples"]]


def build_vocabulary_file(sources: Path, folder: Path) -> Path:
    corpus = (sources / "corpus.txt").read_text()
    texts = prompt_texts(json.loads((sources / "prompts.json").read_text()))
    required = {piece for text in texts for piece in split_words(text)}
    # The prompts count as part of the corpus: the course writes both.
    vocabulary = build_vocabulary(corpus + "\n" + "\n".join(texts), tiny_config().vocab_size, required)
    path = folder / "vocab.json"
    path.write_text(json.dumps(vocabulary, indent=0) + "\n")
    return path


def _draw_lengths(mu_in: float, mu_out: float, stats: dict) -> tuple[list[int], list[int]]:
    """TRACE_REQUESTS (input, output) pairs from log-normals, redrawn above MAX_TOTAL_TOKENS."""
    rng = random.Random(TRACE_SEED)
    inputs: list[int] = []
    outputs: list[int] = []
    while len(inputs) < TRACE_REQUESTS:
        prompt = max(1, round(rng.lognormvariate(mu_in, stats["sigma_input"])))
        output = max(1, round(rng.lognormvariate(mu_out, stats["sigma_output"])))
        if prompt + output <= MAX_TOTAL_TOKENS:
            inputs.append(prompt)
            outputs.append(output)
    return inputs, outputs


def trace(stats: dict) -> tuple[list[int], list[int]]:
    """Lengths whose means match the published ones after the cut at MAX_TOTAL_TOKENS.

    The cut lowers the means, so the log-normals' locations are corrected a few times with
    the same random draws (common random numbers): deterministic, and within a token or so.
    """
    sigma_in, sigma_out = stats["sigma_input"], stats["sigma_output"]
    mu_in = math.log(stats["mean_input_tokens"]) - sigma_in**2 / 2
    mu_out = math.log(stats["mean_output_tokens"]) - sigma_out**2 / 2
    for _ in range(6):
        inputs, outputs = _draw_lengths(mu_in, mu_out, stats)
        mu_in += math.log(stats["mean_input_tokens"] / (sum(inputs) / len(inputs)))
        mu_out += math.log(stats["mean_output_tokens"] / (sum(outputs) / len(outputs)))
    return _draw_lengths(mu_in, mu_out, stats)


def build_trace_file(name: str, folder: Path) -> Path:
    stats = TRACES[name]
    inputs, outputs = trace(stats)
    record = {
        "name": name,
        "source": PAPER,
        "published": {key: stats[key] for key in ("mean_input_tokens", "mean_output_tokens")},
        "how_made": (
            f"{TRACE_REQUESTS} draws from log-normals with sigma {stats['sigma_input']} (input) and "
            f"{stats['sigma_output']} (output), random.Random({TRACE_SEED}), pairs longer than "
            f"{MAX_TOTAL_TOKENS} tokens redrawn, locations corrected so the means match the published ones; "
            "the sigmas are the course's choice, not measured"
        ),
        "static_capacity": MAX_TOTAL_TOKENS,
        "sampled": {
            "mean_input_tokens": round(sum(inputs) / len(inputs), 2),
            "mean_output_tokens": round(sum(outputs) / len(outputs), 2),
        },
        "input_tokens": inputs,
        "output_tokens": outputs,
    }
    path = folder / f"{name}.json"
    # One request list per line: the file stays small and diffs stay readable.
    lines = [f"  {json.dumps(key)}: {json.dumps(value)}" for key, value in record.items()]
    path.write_text("{\n" + ",\n".join(lines) + "\n}\n")
    return path


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def build(out: Path, sources: Path) -> list[Path]:
    """Write every built file under ``out`` (which may be ``sources`` itself); returns them."""
    out = Path(out)
    model_folder = out / TINY_QWEN3
    built = save_qwen3(random_qwen3(MODEL_SEED, tiny_config()), model_folder)
    built.append(build_vocabulary_file(Path(sources), model_folder))
    traces = out / "workloads"
    traces.mkdir(parents=True, exist_ok=True)
    built.extend(build_trace_file(name, traces) for name in sorted(TRACES))
    lines = [f"{sha256(path)}  {path.relative_to(out).as_posix()}" for path in built]
    checksums = out / CHECKSUMS
    checksums.write_text("\n".join(lines) + "\n")
    return [*built, checksums]


def read_checksums(folder: Path) -> dict[str, str]:
    """{relative path: sha256} from folder/SHA256SUMS."""
    entries = {}
    for line in (Path(folder) / CHECKSUMS).read_text().splitlines():
        digest, name = line.split(maxsplit=1)
        entries[name] = digest
    return entries


def mismatches(folder: Path) -> list[str]:
    """The files under ``folder`` whose sha256 differs from SHA256SUMS (or that are missing)."""
    folder = Path(folder)
    wrong = []
    for name, digest in read_checksums(folder).items():
        path = folder / name
        if not path.is_file():
            wrong.append(f"{name} (missing)")
        elif sha256(path) != digest:
            wrong.append(f"{name} (sha256 {sha256(path)[:12]}..., SHA256SUMS says {digest[:12]}...)")
    return wrong
