"""Where replayed launches' time went, from a kreplay-cuda-replay log taken with KREPLAY_INJECT_LOG=info:

  python3 phases.py LOG

Each replayed stream launch in kernel mode logs one line, its phases in order and, inside its passes, the profiler's, the cache flushes',
the collection's and the restores' time (ms), and the profiler's time in each counted pass. When the program's own
launch is the last counted pass, its share of those parts lies in the `program` and `program pass` phases. Printed: the number of
launches, each part's median and total over them, largest total first, then the profiler's median by pass."""
import collections
import re
import statistics
import sys

LINE = re.compile(r"kreplay-inject: launch \d+: (.*); in the passes: (.*); profiler by pass:(.*); kernel ")
ANY = re.compile(r"kreplay-inject: launch \d+: ")
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
    for index, ms in enumerate(found.group(3).split()):
        parts[f"profiler, pass {index + 1}"] = float(ms)
    return parts


def main():
    values = collections.defaultdict(list)
    launches = 0
    unread = 0
    with open(sys.argv[1], errors="replace") as log:
        for line in log:
            parts = parts_of(line.rstrip("\n"))
            if parts is None:
                unread += 1 if ANY.search(line) else 0
                continue
            launches += 1
            for name, ms in parts.items():
                values[name].append(ms)
    print(f"{launches} launches logged (ms: median, total)" + (f"; {unread} lines not read" if unread else ""))
    by_pass = {name: ms for name, ms in values.items() if name.startswith("profiler, pass")}
    for name, ms in sorted(values.items(), key=lambda item: -sum(item[1])):
        if name not in by_pass:
            print(f"  {name}: {statistics.median(ms):.3f}, {sum(ms):.1f}")
    if by_pass:
        print("  profiler by pass (median): " + " ".join(f"{statistics.median(ms):.2f}" for ms in by_pass.values()))


if __name__ == "__main__":
    main()
