"""run_replay.sh's watcher of the host's memory: samples MemAvailable and MemTotal (/proc/meminfo) every 0.2 s
until killed, and keeps in PREFIX.min the lowest share available seen (percent, then the kB figures)."""
import signal
import sys
import time

prefix = sys.argv[1]
lowest = None


def meminfo():
    values = {}
    with open("/proc/meminfo") as f:
        for line in f:
            name, rest = line.split(":", 1)
            values[name] = int(rest.split()[0])
    return values["MemAvailable"], values["MemTotal"]


def stop(*_):
    sys.exit(0)


signal.signal(signal.SIGTERM, stop)
while True:
    available, total = meminfo()
    share = 100.0 * available / total
    if lowest is None or share < lowest[0]:
        lowest = (share, available, total)
        with open(prefix + ".min", "w") as f:
            f.write(f"{share:.1f} % available={available} kB total={total} kB\n")
    time.sleep(0.2)
