// Host execution layer (tests/gpu_host): the system dlfcn.h, with dlopen/dlsym/dlerror routed
// through the layer so that the CUDA backend's dlopen of cuBLAS finds the reference cuBLAS of
// tests/gpu_host/cublas.cc (any other name goes to the real dlopen).
#pragma once

#include_next <dlfcn.h>

namespace tinyserve::gpu_host {
void* HostDlopen(const char* name, int flags);
void* HostDlsym(void* handle, const char* symbol);
char* HostDlerror();
}  // namespace tinyserve::gpu_host

#define dlopen ::tinyserve::gpu_host::HostDlopen
#define dlsym ::tinyserve::gpu_host::HostDlsym
#define dlerror ::tinyserve::gpu_host::HostDlerror
