#pragma once
// Loading the libraries that xgrad's own libraries load at run time: the CUDA backend's
// (libxgrad_cuda.so, core/src/dispatch.cpp) and the MPI plugin (libxgrad_mpi.so,
// train/src/distributed/mpi_loader.cpp). Internal to xgrad (namespace detail): a program has no
// use for it. Each such library depends on something that libxgrad must not need in order to
// load (the CUDA libraries, MPI), so libxgrad opens it with dlopen when that is first used.
#include <string>

namespace xgrad::detail
{
    struct plugin_library
    {
        void* entry = nullptr; // the entry point; nullptr when the library could not be opened
        std::string path;      // the path it was opened by
        std::string error;     // why not, when entry is nullptr
    };

    /// Opens the library `file_name` (e.g. "libxgrad_mpi.so") and finds its function `entry`
    /// (dlsym); `error` says why not (dlerror(), or the entry point missing) when it cannot.
    /// Where: the path in the environment variable `path_variable` when it is set and not empty
    /// (nothing else is tried then); else the folder of libxgrad itself (an install puts the
    /// libraries side by side); else `file_name` on the loader's search path. `global`: open it
    /// RTLD_GLOBAL (its symbols and its dependencies' serve the libraries loaded after it),
    /// else RTLD_LOCAL. The library is never closed: what it holds lives until the process ends.
    plugin_library open_plugin_library(const char* file_name, const char* path_variable, const char* entry,
                                       bool global);
}
