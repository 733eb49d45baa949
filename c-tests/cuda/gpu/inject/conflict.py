"""Check (f) of run_inject.sh: CUPTI already held when the injection starts. This script subscribes to CUPTI
itself before CUDA is initialised (as a profiler would), then uses CUDA through PyTorch, so that the injection's
cuptiSubscribe at cuInit gets CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED. The runner checks that stderr
holds exactly one line from the injection and that the program ran to the end."""
import ctypes
import glob
import os
import sys

import torch  # noqa: F401  (loads torch's own libcupti.so.13, which the injection will find)

candidates = glob.glob(os.path.join(os.path.dirname(torch.__file__), "..", "nvidia", "*", "lib", "libcupti.so*"))
candidates += glob.glob("/usr/local/cuda/lib64/libcupti.so*")
candidates += glob.glob("/usr/local/cuda/extras/CUPTI/lib64/libcupti.so*")
cupti = None
try:
    cupti = ctypes.CDLL("libcupti.so.13", mode=os.RTLD_NOLOAD)
except OSError:
    for path in candidates:
        try:
            cupti = ctypes.CDLL(path)
            break
        except OSError:
            pass
if cupti is None:
    print("RESULT conflict skipped=no-libcupti", flush=True)
    sys.exit(0)
CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p)
callback = CALLBACK(lambda *_: None)
handle = ctypes.c_void_p()
rc = cupti.cuptiSubscribe(ctypes.byref(handle), callback, None)
print(f"RESULT conflict own_subscribe={rc}", flush=True)
x = torch.ones(1024, device="cuda")
print(f"RESULT conflict program_ran={int(float(x.sum()) == 1024.0)}", flush=True)
