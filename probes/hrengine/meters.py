"""Memory meters per phase: the CUDA caching allocator's statistics, or the process's resident
memory on the CPU."""
import os
import re
import time


class CudaMeter:
    """The caching allocator's own statistics; device and process totals from CUDA and NVML."""

    cuda = True

    def __init__(self, torch):
        self.t = torch
        self.nvml = None
        try:
            import pynvml
            pynvml.nvmlInit()
            idx = torch.cuda.current_device()
            visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
            ids = [s for s in visible.split(",") if s.strip()]
            if ids and ids[idx].strip().isdigit():
                idx = int(ids[idx])
            self.nvml = (pynvml, pynvml.nvmlDeviceGetHandleByIndex(idx))
        except Exception:  # NVML is optional: cudaMemGetInfo still gives the device total
            self.nvml = None

    def sync(self):
        self.t.cuda.synchronize()

    def reset_peak(self):
        self.t.cuda.reset_peak_memory_stats()

    def allocated_now(self):
        # The nested statistics straight from C++: memory_allocated() flattens every statistic in
        # Python first, 0.3 ms a call, and attribution samples thousands of times.
        return self.t.cuda.memory_stats_as_nested_dict()["allocated_bytes"]["all"]["current"]

    def read(self):
        s = self.t.cuda.memory_stats()
        return {"allocated": s.get("allocated_bytes.all.current", 0), "allocated_peak": s.get("allocated_bytes.all.peak", 0),
                "reserved": s.get("reserved_bytes.all.current", 0), "reserved_peak": s.get("reserved_bytes.all.peak", 0),
                "retries": s.get("num_alloc_retries", 0), "ooms": s.get("num_ooms", 0)}

    def device_used_total(self):
        free, total = self.t.cuda.mem_get_info()
        return int(total - free), int(total)

    def process_used(self):
        """This process's device memory as nvidia-smi lists it (context + pool + libraries)."""
        if not self.nvml:
            return 0
        pynvml, h = self.nvml
        try:
            procs = pynvml.nvmlDeviceGetComputeRunningProcesses(h)
        except Exception:
            return 0
        me = os.getpid()
        return int(sum(p.usedGpuMemory or 0 for p in procs if p.pid == me))

    def driver(self):
        if self.nvml:
            try:
                d = self.nvml[0].nvmlSystemGetDriverVersion()
                return "NVIDIA driver " + (d.decode() if isinstance(d, bytes) else d)
            except Exception:
                pass
        return "CUDA " + str(self.t.version.cuda)

    def mark(self):
        return None

    def finish(self):
        pass


class CpuMeter:
    """On the CPU the bytes come from the profiler's record of every CPU allocator call
    (profile_memory), replayed in order; markers and samples are resolved afterwards."""

    cuda = False

    def __init__(self, torch):
        self.t = torch
        from torch.profiler import ProfilerActivity, profile
        self.prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=False)
        self.prof.__enter__()
        self.events = None
        self.times = None
        self.cum = None

    def sync(self):
        pass

    @staticmethod
    def now_us():
        return time.time_ns() // 1000

    def mark(self):
        return self.now_us()

    def finish(self):
        if self.events is not None:
            return
        self.prof.__exit__(None, None, None)
        evs = []
        kr = getattr(self.prof.profiler, "kineto_results", None)
        raw = kr.events() if kr is not None else []
        for i, e in enumerate(raw):
            if e.name() != "[memory]":
                continue
            if hasattr(e, "device_type") and str(e.device_type()).split(".")[-1].upper() != "CPU":
                continue
            t = e.start_ns() / 1000.0 if hasattr(e, "start_ns") else float(e.start_us())
            evs.append((t, i, int(e.nbytes())))
        evs.sort()
        self.times = [e[0] for e in evs]
        cum, total = [], 0
        for e in evs:
            total += e[2]
            cum.append(total)
        self.events, self.cum = evs, cum

    def _index(self, t_us):
        import bisect
        return bisect.bisect_right(self.times, t_us)

    def at(self, t_us):
        i = self._index(t_us)
        return self.cum[i - 1] if i > 0 else 0

    def window(self, t0, t1):
        """(allocated at t0, peak in [t0, t1], allocated at t1)"""
        i0, i1 = self._index(t0), self._index(t1)
        start = self.cum[i0 - 1] if i0 > 0 else 0
        peak = max([start] + self.cum[i0:i1])
        end = self.cum[i1 - 1] if i1 > 0 else 0
        return start, peak, end


def oom_requested_bytes(msg):
    m = re.search(r"Tried to allocate ([0-9.]+) (GiB|MiB|KiB|B)", msg)
    if m:
        return int(float(m.group(1)) * {"GiB": 1 << 30, "MiB": 1 << 20, "KiB": 1 << 10, "B": 1}[m.group(2)])
    m = re.search(r"you tried to allocate (\d+) bytes", msg)
    return int(m.group(1)) if m else 0


def is_oom(torch, e):
    if isinstance(e, MemoryError):
        return True
    oom_cls = getattr(torch, "OutOfMemoryError", None) or getattr(torch.cuda, "OutOfMemoryError", None)
    if oom_cls is not None and isinstance(e, oom_cls):
        return True
    s = str(e)
    return isinstance(e, RuntimeError) and ("out of memory" in s or "can't allocate memory" in s)


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform
    return platform.processor() or "CPU"


def vm_bytes():
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return 0
