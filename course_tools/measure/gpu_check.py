"""`make gpu-check`: run every worked notebook at real size on a CUDA GPU and report its figures.

For each lesson (`course_tools.lessons.assignment_ids()`, so a new lesson is never left out) it runs
nbval over notebooks/<lesson>/ with pyproject's options (--nbval-lax: the nbval-check-output cells
must print what they print on a CPU), and gathers the figures the notebook recorded with
`helpers.report.record` while it ran. The report (gpu-report/report.md, report.json, one nbval log
per lesson) therefore shows what the student's notebook measures, not a second copy of it; a
lesson that records nothing is reported as "no figures". It exits non-zero when nbval fails.

Without a CUDA GPU it says so in one line and runs the same notebooks on the CPU, at the size they
take there: a self-test of the code paths, exit 0 unless a notebook fails. `--self-test` forces
that path on a GPU machine (the notebooks then see no GPU).

    python -m course_tools.measure.gpu_check [--out gpu-report] [--self-test]
        [--lessons 01_mixed_precision ...]
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import os
import platform
import subprocess
import sys
import time
import tomllib
from pathlib import Path

from course_tools.lessons import CELL_TIMEOUT_S, REPO_ROOT, assignment_ids
from course_tools.measure.gpu_report import parse_junit, read_figures, write_report
from helpers.report import FIGURES_ENV

NO_GPU_LINE = "no CUDA GPU: the GPU check ran its self-test only"


def _importable_category(entry: str) -> bool:
    """Whether the warning class of a filterwarnings entry ("action:message:category:...") imports."""
    parts = entry.split(":")
    category = parts[2].strip() if len(parts) > 2 else ""
    if "." not in category:
        return True          # empty, or a builtin such as DeprecationWarning
    module, _, name = category.rpartition(".")
    try:
        return hasattr(importlib.import_module(module), name)
    except ImportError:
        return False


def warning_filter_override(pyproject: Path = REPO_ROOT / "pyproject.toml") -> list[str]:
    """pytest options that keep pyproject's filterwarnings minus the entries whose warning class is
    not installed here (sqlalchemy's, which only nbgrader brings): pytest 8 stops with an error on
    those, and a warning from a package that is not installed cannot be raised anyway."""
    config = tomllib.loads(pyproject.read_text())
    filters = config.get("tool", {}).get("pytest", {}).get("ini_options", {}).get("filterwarnings", [])
    usable = [entry for entry in filters if _importable_category(entry)]
    return [] if usable == filters else ["-o", "filterwarnings=" + "\n".join(usable)]


def _output_text(output) -> str:
    if isinstance(output, bytes):
        return output.decode(errors="replace")
    return output or ""


def run_lesson(lesson: str, out_dir: Path, timeout_s: int, hide_gpu: bool) -> dict:
    """nbval over notebooks/<lesson>/ with $COURSE_FIGURES set; its results and recorded figures."""
    junit, log = out_dir / f"{lesson}.junit.xml", out_dir / f"{lesson}.nbval.log"
    figures_path = out_dir / f"{lesson}.figures.jsonl"
    figures_path.unlink(missing_ok=True)
    command = [sys.executable, "-m", "pytest", f"notebooks/{lesson}", "-q", "-p", "no:xdist",
               f"--nbval-cell-timeout={CELL_TIMEOUT_S}",
               f"--junitxml={junit}", *warning_filter_override()]
    env = dict(os.environ)
    env.pop("NBGRADER_EXECUTION", None)          # the notebooks would shrink to their grading size
    env[FIGURES_ENV] = str(figures_path)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    if hide_gpu:
        env["CUDA_VISIBLE_DEVICES"] = ""
    started = time.perf_counter()
    try:
        completed = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                                   timeout=timeout_s)
        output, returncode = completed.stdout + completed.stderr, completed.returncode
    except subprocess.TimeoutExpired as expired:
        output = _output_text(expired.stdout) + f"\n(nbval stopped after {timeout_s} s)"
        returncode = None
    log.write_text(output)
    nbval = {"command": f"python -m pytest notebooks/{lesson}", "returncode": returncode,
             "duration_s": time.perf_counter() - started, "log": log.name,
             "summary": next((line for line in reversed(output.splitlines()) if line.strip()), "")}
    if junit.exists():
        nbval.update(parse_junit(junit))
    figures, problems = read_figures(figures_path)
    return {"nbval": nbval, "figures": figures, "problems": problems}


def _git_commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True,
                              text=True, check=True).stdout.strip() or None
    except (OSError, subprocess.CalledProcessError):
        return None


def machine_info(use_gpu: bool) -> dict:
    import torch

    info = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
            "platform": platform.platform(), "cpu_count": os.cpu_count(), "commit": _git_commit(),
            "device": "cpu"}
    if use_gpu:
        properties = torch.cuda.get_device_properties(0)
        info.update(device=torch.cuda.get_device_name(0),
                    capability=".".join(map(str, torch.cuda.get_device_capability(0))),
                    gpu_memory_bytes=properties.total_memory, cudnn=torch.backends.cudnn.version())
    return info


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    lessons = assignment_ids(REPO_ROOT)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "gpu-report", help="report folder")
    parser.add_argument("--self-test", action="store_true", help="run on the CPU even on a GPU machine")
    parser.add_argument("--lessons", nargs="+", choices=lessons, default=lessons, help="default: all")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds for one lesson's notebook")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    import torch

    args = parse_args(argv)

    has_cuda = torch.cuda.is_available()
    report = {"mode": "gpu", "written": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
              "lessons": {}}
    if not has_cuda:
        print(NO_GPU_LINE, flush=True)
        report.update(mode="cpu-self-test",
                      reason="No CUDA GPU was found (torch.cuda.is_available() is False)")
    elif args.self_test:
        print("--self-test: the GPU check ran its CPU self-test only", flush=True)
        report.update(mode="cpu-self-test", reason="The CPU self-test was asked for (--self-test)")
    use_gpu = report["mode"] == "gpu"
    report["machine"] = machine_info(use_gpu)
    out_dir = args.out.resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    failed = False
    for lesson in args.lessons:
        print(f"{lesson}: nbval over notebooks/{lesson} ...", flush=True)
        section = run_lesson(lesson, out_dir, args.timeout, hide_gpu=not use_gpu)
        report["lessons"][lesson] = section
        failed = failed or section["nbval"]["returncode"] != 0 or bool(section["problems"])
        write_report(report, out_dir)
        count = len(section["figures"]) or "no"
        print(f"{lesson}: {section['nbval']['summary']}; {count} figures", flush=True)
    path = write_report(report, out_dir)
    print(f"report: {path} (raw: {path.with_suffix('.json')}, nbval logs beside it)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
