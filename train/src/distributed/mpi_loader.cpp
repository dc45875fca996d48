// Finding the MPI plugin's table (mpi_api.hpp): loaded from libxgrad_mpi.so in a shared build
// (XGRAD_MPI_LIBRARY), linked in a static one. Compiled only in a build with MPI.
//
// When: distributed::init loads it (load()); everything else asks loaded(), which never loads
// the plugin on its own initiative, so a process that never joins a job never maps an MPI
// library, and launched_by_mpi() and local_process_count() read the environment only.
#include <atomic>
#include <stdexcept>
#include <string>

#include "mpi_api.hpp"

#ifdef XGRAD_MPI_LIBRARY
#include <dlfcn.h>

#include "xgrad/plugin_library.hpp"
#endif

namespace xgrad::distributed::mpi_api
{
#ifdef XGRAD_MPI_LIBRARY
    namespace
    {
        constexpr const char* library_name = "libxgrad_mpi.so";

        struct plugin_state
        {
            const table* t = nullptr;
            std::string error; // why there is none ("could not be ...: <why>")
        };

        /// The table once loaded; read without a lock by loaded().
        std::atomic<const table*> loaded_table{nullptr};

        const plugin_state& plugin()
        {
            // Loaded once, by the first thread that asks (a static local's initialisation is
            // thread-safe); a failure is remembered too, and reported on every ask.
            static const plugin_state state = [] {
                plugin_state s;
                // RTLD_GLOBAL: MPI in the global scope, as when a program links it. MPI
                // implementations load their own components with dlopen, and those built without
                // a dependency on libmpi (Debian's Open MPI components name none) resolve its
                // symbols from there; Open MPI 4.1 also copes with RTLD_LOCAL, others need not.
                const detail::plugin_library lib = detail::open_plugin_library(library_name, "XGRAD_MPI_LIBRARY",
                                                                               "xgrad_mpi_api", true);
                if (!lib.entry)
                {
                    s.error = "could not be loaded (is the MPI library it was built with, e.g. Open MPI's libmpi, "
                              "installed?): " +
                              lib.error;
                    return s;
                }
                using entry_type = const table* (*)() noexcept;
                const table* t = reinterpret_cast<entry_type>(lib.entry)();
                if (!t || t->version != version || t->table_size != sizeof(table))
                {
                    s.error = "could not be used: " + lib.path +
                              ": was built from another version of xgrad (its MPI interface is version " +
                              (t ? std::to_string(t->version) + " of " + std::to_string(t->table_size) + " bytes"
                                 : std::string("unknown")) +
                              ", this libxgrad's is version " + std::to_string(version) + " of " +
                              std::to_string(sizeof(table)) + " bytes)";
                    return s;
                }
                s.t = t;
                loaded_table.store(t, std::memory_order_release);
                return s;
            }();
            return state;
        }
    }

    const table& load(const char* what)
    {
        const plugin_state& s = plugin();
        if (!s.t)
            throw std::runtime_error(std::string(what) + ": this build of xgrad has MPI support, but its MPI plugin " +
                                     library_name + " " + s.error);
        return *s.t;
    }

    const table* loaded() noexcept
    {
        if (const table* t = loaded_table.load(std::memory_order_acquire))
            return t;
        // A program that links MPI itself may have initialised it without distributed::init:
        // it sees that job, as it did when libxgrad linked MPI. Its MPI symbols are then in the
        // global scope, and loading the plugin adds no MPI library to the process. (A failure
        // to load is remembered; the world stays one process, and init() reports why.)
        if (::dlsym(RTLD_DEFAULT, "MPI_Initialized") != nullptr)
            return plugin().t;
        return nullptr;
    }
#else
    // A static build: the plugin is part of libxgrad, and so is MPI.
    const table& load(const char*) { return *xgrad_mpi_api(); }
    const table* loaded() noexcept { return xgrad_mpi_api(); }
#endif
}
