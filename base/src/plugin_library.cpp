// Loading xgrad's run-time libraries (xgrad/plugin_library.hpp).
#include "xgrad/plugin_library.hpp"

#include <dlfcn.h>

#include <cstdlib>

namespace xgrad::detail
{
    namespace
    {
        plugin_library open_at(std::string path, const char* entry, bool global)
        {
            plugin_library p;
            p.path = std::move(path);
            void* handle = ::dlopen(p.path.c_str(), RTLD_NOW | (global ? RTLD_GLOBAL : RTLD_LOCAL));
            if (!handle)
            {
                const char* why = ::dlerror();
                p.error = why ? why : (p.path + ": cannot be loaded");
                return p;
            }
            p.entry = ::dlsym(handle, entry);
            if (!p.entry)
                p.error = p.path + ": has no entry point " + entry + " (not the library of xgrad's that was expected)";
            return p;
        }

        /// The folder of the file that holds this function (libxgrad.so), with a '/'; empty when
        /// unknown.
        std::string own_folder()
        {
            Dl_info info{};
            if (::dladdr(reinterpret_cast<void*>(&own_folder), &info) == 0 || !info.dli_fname)
                return {};
            const std::string file = info.dli_fname;
            const auto slash = file.rfind('/');
            return slash == std::string::npos ? std::string() : file.substr(0, slash + 1);
        }
    }

    plugin_library open_plugin_library(const char* file_name, const char* path_variable, const char* entry, bool global)
    {
        if (const char* path = std::getenv(path_variable); path && *path)
            return open_at(path, entry, global);
        plugin_library beside = open_at(own_folder() + file_name, entry, global);
        if (beside.entry)
            return beside;
        plugin_library by_name = open_at(file_name, entry, global);
        if (!by_name.entry)
            by_name.error = beside.error + "; " + by_name.error;
        return by_name;
    }
}
