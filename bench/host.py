"""What a benchmark prints of the machine it ran on (every figure names its CPU)."""


def cpu_name():
    """/proc/cpuinfo's model name ("AMD EPYC", "Intel(R) Xeon(R) Platinum 8488C"), or "unknown CPU"."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"
