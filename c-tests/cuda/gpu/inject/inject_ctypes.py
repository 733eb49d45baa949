"""ctypes bindings of libkreplay_cuda_inject.so's C API (adapters/cuda/include/kreplay/kreplay_inject.h), for the
GPU checks run by run_inject.sh. The library is already in the process (the driver loaded it from
CUDA_INJECTION64_PATH at cuInit); loading it again by the same path returns the same instance."""
import ctypes
import os

size_t = ctypes.c_size_t
u64 = ctypes.c_uint64


class InventoryStats(ctypes.Structure):
    _fields_ = [("regions", size_t), ("bytes", size_t), ("capacity", size_t), ("overflowed", size_t)]


class State(ctypes.Structure):
    _fields_ = [("tracking", ctypes.c_bool), ("subscribed", ctypes.c_bool), ("callbacks_enabled", size_t),
                ("allocations", u64), ("frees", u64), ("unknown_frees", u64), ("record_errors", u64),
                ("modules_loaded", u64), ("modules_unloaded", u64), ("contexts_forgotten", u64),
                ("callbacks_raised", u64)]


class Untracked(ctypes.Structure):
    _fields_ = [(n, size_t) for n in ("managed_count", "managed_bytes", "host_pinned_count", "host_pinned_bytes",
                                      "host_mapped_count", "host_mapped_bytes")]


UNTRACKED_KINDS = ("fine_grained", "host", "managed", "kernarg", "executable", "vmem_unknown")  # kreplay.h's order


class KreplayUntracked(ctypes.Structure):
    """kreplay_untracked_t: kreplay's own untracked memory of an agent, indexed by kreplay_untracked_kind_t."""
    _fields_ = [("count", size_t * len(UNTRACKED_KINDS)), ("bytes", size_t * len(UNTRACKED_KINDS))]

    def of(self, kind):
        """(count, bytes) of a kind named as in UNTRACKED_KINDS."""
        index = UNTRACKED_KINDS.index(kind)
        return self.count[index], self.bytes[index]


class Variable(ctypes.Structure):
    _fields_ = [("module_id", ctypes.c_uint32), ("name", ctypes.c_char_p), ("address", u64), ("size", size_t),
                ("is_constant", ctypes.c_bool)]


class RestoreReport(ctypes.Structure):
    _fields_ = [(n, size_t) for n in ("restored", "skipped", "failed", "bytes", "clean_bytes")]


class SnapshotResult(ctypes.Structure):
    _fields_ = [("snap_status", ctypes.c_int), ("reason", ctypes.c_int), ("regions", size_t),
                ("module_variables", size_t), ("bytes", size_t), ("restore_status", ctypes.c_int),
                ("report", RestoreReport), ("detail", ctypes.c_char * 512)]


VISITOR = ctypes.CFUNCTYPE(ctypes.c_bool, ctypes.c_void_p, ctypes.POINTER(Variable))


class Injection:
    def __init__(self, path=None):
        path = path or os.environ["CUDA_INJECTION64_PATH"]
        self.lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_NOW)
        for name in ("kreplay_inject_state", "kreplay_inject_inventory_stats", "kreplay_inject_untracked",
                     "kreplay_inject_live_bytes", "kreplay_inject_module_counts", "kreplay_inject_list_variables",
                     "kreplay_inject_snapshot", "kreplay_inject_untracked_stats", "kreplay_inject_set_subscribed"):
            getattr(self.lib, name).restype = ctypes.c_int

    def set_subscribed(self, subscribed):
        return self.lib.kreplay_inject_set_subscribed(ctypes.c_bool(subscribed))

    def state(self):
        s = State()
        self.lib.kreplay_inject_state(ctypes.byref(s))
        return s

    def inventory(self, device=0):
        s = InventoryStats()
        rc = self.lib.kreplay_inject_inventory_stats(device, ctypes.byref(s))
        return rc, s

    def live_bytes(self, device=0):
        """The bytes the tracker itself saw allocated minus freed on the device (its own tables)."""
        value = size_t()
        rc = self.lib.kreplay_inject_live_bytes(device, ctypes.byref(value))
        return rc, value.value

    def untracked(self, device=0):
        u = Untracked()
        rc = self.lib.kreplay_inject_untracked(device, ctypes.byref(u))
        return rc, u

    def untracked_stats(self, device=0):
        """kreplay_untracked_stats of the device's agent, through the injection (kreplay_inject_untracked_stats)."""
        u = KreplayUntracked()
        rc = self.lib.kreplay_inject_untracked_stats(device, ctypes.byref(u))
        return rc, u

    def module_counts(self, device=0):
        modules, variables = size_t(), size_t()
        rc = self.lib.kreplay_inject_module_counts(device, ctypes.byref(modules), ctypes.byref(variables))
        return rc, modules.value, variables.value

    def variables(self, device=0):
        found = []

        def visit(_, variable):
            v = variable.contents
            found.append((v.module_id, v.name.decode(), v.address, v.size, v.is_constant))
            return True

        detail = ctypes.create_string_buffer(512)
        rc = self.lib.kreplay_inject_list_variables(device, VISITOR(visit), None, detail, 512)
        return rc, found, detail.value.decode(errors="replace")

    def snapshot(self, device=0):
        r = SnapshotResult()
        self.lib.kreplay_inject_snapshot(device, ctypes.byref(r))
        return r
