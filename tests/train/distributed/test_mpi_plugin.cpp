// A shared libxgrad built with MPI loads it through its plugin, libxgrad_mpi.so, only when a
// process joins a job (train/src/distributed/mpi_loader.cpp). Each test case is one ctest entry
// (CMakeLists.txt next to this file), run alone with the environment it needs:
//   - a process that uses every collective without init() maps no MPI library;
//   - init() with XGRAD_MPI_LIBRARY naming a file that does not exist, or a plugin of another
//     version of the interface, throws naming the plugin and why, and the world stays one process;
//   - init() with the plugin beside libxgrad loads it and MPI (a singleton job).
#include <doctest/doctest.h>
#include <link.h>

#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "xgrad/distributed/comm.hpp"
#include "xgrad/factories.hpp"
#include "xgrad/ops/reduce.hpp"

namespace dist = xgrad::distributed;

namespace
{
    /// The files of the shared objects mapped into this process now.
    std::vector<std::string> mapped_objects()
    {
        std::vector<std::string> names;
        ::dl_iterate_phdr(
            [](dl_phdr_info* info, std::size_t, void* out) {
                if (info->dlpi_name && *info->dlpi_name)
                    static_cast<std::vector<std::string>*>(out)->push_back(info->dlpi_name);
                return 0;
            },
            &names);
        return names;
    }

    /// The mapped objects whose file name contains one of `parts`, joined for a message.
    std::string mapped_matching(const std::vector<std::string>& parts)
    {
        std::string found;
        for (const std::string& name : mapped_objects())
            for (const std::string& part : parts)
                if (name.find(part) != std::string::npos)
                    found += name + " ";
        return found;
    }

    const std::vector<std::string> mpi_libraries = {"libxgrad_mpi", "libmpi", "libopen-pal", "libopen-rte", "libpmix"};

    /// The message of the std::runtime_error that init() throws ("" when it does not throw).
    std::string init_error()
    {
        try
        {
            dist::init();
        }
        catch (const std::runtime_error& e)
        {
            return e.what();
        }
        return "";
    }

    void check_world_of_one()
    {
        CHECK_FALSE(dist::is_initialized());
        CHECK(dist::world_size() == 1);
        CHECK(dist::rank() == 0);
        const xgrad::tensor t = xgrad::arange(0.0, 6.0, 1.0, xgrad::dtype::float64);
        dist::all_reduce(t, dist::reduce_op::mean);
        CHECK(xgrad::sum(t).item() == 15.0);
    }
}

TEST_CASE("a process that never joins a job maps no MPI library")
{
    CHECK(dist::mpi_available());
    (void)dist::launched_by_mpi();
    CHECK(dist::local_process_count() >= 1);
    check_world_of_one();
    const xgrad::tensor t = xgrad::arange(0.0, 4.0, 1.0, xgrad::dtype::float32);
    dist::broadcast(t, 0);
    CHECK(dist::all_gather(t).size() == 1);
    dist::barrier();
    dist::all_reduce_async(t, dist::reduce_op::sum).wait();
    CHECK(dist::functional::all_reduce(t).numel() == 4);
    CHECK(dist::process_group::world().size() == 1);
    const std::string mapped = mapped_matching(mpi_libraries);
    CHECK_MESSAGE(mapped.empty(), "mapped: ", mapped);
}

TEST_CASE("init names the MPI plugin it cannot load")
{
    const char* path = std::getenv("XGRAD_MPI_LIBRARY");
    REQUIRE(path != nullptr);
    const std::string message = init_error();
    CHECK_MESSAGE(message.find("distributed::init: ") == 0, message);
    CHECK_MESSAGE(message.find("MPI plugin libxgrad_mpi.so could not be loaded") != std::string::npos, message);
    CHECK_MESSAGE(message.find(path) != std::string::npos, message); // dlerror() names the file
    // A second try says the same, and the process is still a world of one.
    CHECK(init_error() == message);
    check_world_of_one();
}

TEST_CASE("init refuses an MPI plugin of another version")
{
    const char* path = std::getenv("XGRAD_MPI_LIBRARY");
    REQUIRE(path != nullptr);
    const std::string message = init_error();
    CHECK_MESSAGE(message.find("MPI plugin libxgrad_mpi.so could not be used: ") != std::string::npos, message);
    CHECK_MESSAGE(message.find(std::string(path) + ": was built from another version of xgrad") != std::string::npos,
                  message);
    CHECK_MESSAGE(message.find("version 999") != std::string::npos, message);
    check_world_of_one();
}

TEST_CASE("init loads the MPI plugin from beside libxgrad, and MPI with it")
{
    REQUIRE(std::getenv("XGRAD_MPI_LIBRARY") == nullptr);
    CHECK(mapped_matching(mpi_libraries).empty());
    dist::init();
    CHECK(dist::is_initialized());
    CHECK(dist::world_size() >= 1);
    // XGRAD_MPI_PLUGIN_FILE: the build's plugin, in the folder of the build's libxgrad.
    CHECK_MESSAGE(mapped_matching({XGRAD_MPI_PLUGIN_FILE}) != "", "mapped: ", mapped_matching(mpi_libraries));
    CHECK_MESSAGE(mapped_matching({"libmpi"}) != "", "mapped: ", mapped_matching(mpi_libraries));
    dist::finalize();
    CHECK_FALSE(dist::is_initialized());
}
