"""Where replayed launches' time went, from a kreplay-cuda-replay log taken with KREPLAY_INJECT_LOG=info:

  python3 phases.py LOG

Each replayed launch logs one line, its phases in order and, inside its passes, the profiler's, the cache flushes',
the collection's and the restores' time (ms). Printed: the number of launches, then each part's median and total
over them, largest total first."""
import collections
import re
import statistics
import sys

LINE = re.compile(r"kreplay-inject: launch \d+ \(.*\): (.*); in the passes: (.*)$")
PART = re.compile(r"([a-z][a-z ]*) (-?[0-9.]+)$")


def parts_of(line):
    found = LINE.search(line)
    if not found:
        return None
    parts = {}
    for text in (found.group(1) + ", " + found.group(2)).split(", "):
        part = PART.match(text.strip())
        if part:
            parts[part.group(1)] = float(part.group(2))
    return parts


def main():
    values = collections.defaultdict(list)
    launches = 0
    with open(sys.argv[1], errors="replace") as log:
        for line in log:
            parts = parts_of(line.rstrip("\n"))
            if parts is None:
                continue
            launches += 1
            for name, ms in parts.items():
                values[name].append(ms)
    print(f"{launches} launches logged (ms: median, total)")
    for name, ms in sorted(values.items(), key=lambda item: -sum(item[1])):
        print(f"  {name}: {statistics.median(ms):.3f}, {sum(ms):.1f}")


if __name__ == "__main__":
    main()
