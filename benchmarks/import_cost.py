"""Import cost of the modules DAG files import: `python -X importtime`, in a fresh interpreter.

    .venv/bin/python benchmarks/import_cost.py [--runs 5]

For each module prints the median cumulative import time (µs, as reported by -X importtime)
and fails (exit 1) if importing it loads pyspark, boto3 or confluent_kafka. Not part of the test
suite. Modules that do not exist (yet) are reported as missing.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys

MODULES = (
    "airflow_sparklag",
    "airflow_sparklag.monitor",
    "airflow_sparklag.fleet",
    "airflow_sparklag.spark_scan",
    "airflow_sparklag.hooks",
    "airflow_sparklag.sensors",
    "airflow_sparklag.operators",
    "airflow_sparklag.triggers",
)
HEAVY = ("pyspark", "boto3", "botocore", "confluent_kafka")

PROBE = """
import sys, {module}
heavy = sorted({{name.split('.')[0] for name in sys.modules}} & set({heavy!r}))
print('HEAVY=' + ','.join(heavy))
"""


def measure(module: str) -> tuple[int, list[str]] | None:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", PROBE.format(module=module, heavy=HEAVY)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        return None
    cumulative = 0
    for line in done.stderr.splitlines():
        # "import time: self [us] | cumulative | imported package"
        parts = line.split("|")
        if len(parts) == 3 and parts[2].strip() == module:
            cumulative = int(parts[1].strip())
    heavy_line = [line for line in done.stdout.splitlines() if line.startswith("HEAVY=")][-1]
    heavy = [name for name in heavy_line[len("HEAVY=") :].split(",") if name]
    return cumulative, heavy


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    failed = False
    print(f"{'module':36} {'median cumulative ms':>22}  heavy modules loaded")
    for module in MODULES:
        samples = [measure(module) for _ in range(args.runs)]
        if any(sample is None for sample in samples):
            print(f"{module:36} {'missing / fails':>22}")
            continue
        times = [sample[0] for sample in samples if sample]
        heavy = sorted({name for sample in samples if sample for name in sample[1]})
        print(f"{module:36} {statistics.median(times) / 1000:22.1f}  {', '.join(heavy) or '-'}")
        failed = failed or bool(heavy)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
