// train::trainer with distributed_data_parallel (xgrad/train/trainer.hpp), on every rank of the
// job (2 under mpiexec; 1 alone). Each rank also trains the one-process reference itself (no
// communication): the same model and seed, one loader of batch K * B over the whole set. The
// data-parallel run must compute the same parameters and the same metrics, with the last step
// uneven (one rank's batch empty when K = 2), write its files on rank 0 only, log on rank 0 only,
// and resume from its own checkpoint to the same end.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/check_error.hpp"
#include "tests/train/distributed/mpi_job.hpp"
#include "xgrad/distributed/comm.hpp"
#include "xgrad/distributed/data_parallel.hpp"
#include "xgrad/errors.hpp"
#include "xgrad/factories.hpp"
#include "xgrad/nn/activation.hpp"
#include "xgrad/nn/conv.hpp"
#include "xgrad/nn/linear.hpp"
#include "xgrad/nn/sequential.hpp"
#include "xgrad/optim/optimizer.hpp"
#include "xgrad/train/trainer.hpp"

namespace dist = xgrad::distributed;
namespace fs = std::filesystem;
using namespace xgrad;

namespace
{

    constexpr std::int64_t per_rank_batch = 4;

    /// n images of 4x4 random bytes, labels in [0, 3): the same on every rank (fixed seed).
    std::shared_ptr<const data::image_dataset> make_set(std::int64_t n, std::uint64_t seed)
    {
        generator gen(seed);
        auto ds = std::make_shared<data::image_dataset>();
        ds->size = n;
        ds->rows = ds->cols = 4;
        ds->classes = 3;
        for (std::int64_t i = 0; i < n * 16; ++i)
            ds->images.push_back(static_cast<std::uint8_t>(gen.below(256)));
        for (std::int64_t i = 0; i < n; ++i)
            ds->labels.push_back(static_cast<std::uint8_t>(gen.below(3)));
        return ds;
    }

    /// A float64 MLP, so that the reference and the data-parallel run differ only by the order
    /// of summation in the gradients (about 1e-16 relative per operation).
    std::shared_ptr<nn::sequential> make_model()
    {
        generator gen(5);
        auto m = std::make_shared<nn::sequential>();
        nn::linear_options l1(16, 8), l2(8, 3);
        l1.dtype = l2.dtype = dtype::float64;
        m->add("flatten", std::make_shared<nn::flatten>());
        m->add("fc1", std::make_shared<nn::linear>(l1, gen));
        m->add("relu", std::make_shared<nn::relu>());
        m->add("fc2", std::make_shared<nn::linear>(l2, gen));
        return m;
    }

    data::loader_options loader_for(std::int64_t batch, std::int64_t replicas, std::int64_t rank)
    {
        data::loader_options o;
        o.batch_size = batch;
        o.num_replicas = replicas;
        o.rank = rank;
        o.seed = 3;
        o.dtype = dtype::float64;
        return o;
    }

    optim::sgd_options sgd_for()
    {
        optim::sgd_options o;
        o.lr = 0.1;
        o.momentum = 0.9;
        return o;
    }

    std::vector<double> flat_parameters(const nn::module& m)
    {
        std::vector<double> out;
        for (const auto& [name, p] : m.named_parameters())
            for (const double v : to_vector(p))
                out.push_back(v);
        return out;
    }

    double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b)
    {
        REQUIRE(a.size() == b.size());
        double d = 0;
        for (std::size_t i = 0; i < a.size(); ++i)
            d = std::max(d, std::abs(a[i] - b[i]));
        return d;
    }

    /// A folder every rank names alike (rank 0's pid), removed by rank 0 once every rank is done.
    struct shared_folder
    {
        fs::path path;
        shared_folder()
        {
            std::int64_t pid = ::getpid();
            const tensor t = from_host(&pid, {1}, dtype::int64);
            dist::broadcast(t, 0);
            to_host(t, &pid, dtype::int64);
            path = fs::temp_directory_path() / ("xgrad_test_dist_trainer_" + std::to_string(pid));
            if (dist::rank() == 0)
            {
                fs::remove_all(path);
                fs::create_directories(path);
            }
            dist::barrier();
        }
        ~shared_folder()
        {
            dist::barrier();
            if (dist::rank() == 0)
                fs::remove_all(path);
        }
    };

    std::int64_t csv_rows(const fs::path& p)
    {
        std::ifstream in(p);
        std::int64_t rows = 0;
        for (std::string line; std::getline(in, line);)
            rows += !line.empty();
        return rows - 1; // the header
    }
}

TEST_CASE("data-parallel trainer: K ranks of batch B compute one process's run of batch K*B")
{
    const int k = dist::world_size(), r = dist::rank();
    // 27 examples, steps of 4K: for K = 2, 8 + 8 + 8 + 3, so the last step gives rank 0 three
    // examples and rank 1 none; the test set of 11 splits 6 + 5.
    const auto train_set = make_set(27, 11);
    const auto test_set = make_set(11, 12);
    constexpr std::int64_t epochs = 3;

    // The reference, on every rank alone.
    auto ref_model = make_model();
    optim::sgd ref_opt(*ref_model, sgd_for());
    data::data_loader ref_loader(train_set, loader_for(per_rank_batch * k, 1, 0));
    train::trainer_options ro;
    ro.epochs = epochs;
    ro.test_data = test_set;
    train::trainer ref(*ref_model, ref_opt, ref_loader, ro);
    const train::fit_result expected = ref.fit();

    shared_folder out;
    auto model = make_model();
    dist::distributed_data_parallel ddp(model);
    optim::sgd opt(*model, sgd_for());
    data::data_loader loader(train_set, loader_for(per_rank_batch, k, r));
    std::ostringstream log;
    train::trainer_options o = ro;
    o.data_parallel = &ddp;
    o.out = out.path;
    o.log = &log;
    o.run_metadata = {{"test", "data-parallel"}};
    train::trainer t(*model, opt, loader, o);
    const train::fit_result got = t.fit();

    // float64 throughout: the runs differ by the summation order of each gradient (the
    // all-reduce adds the ranks' partial sums, the reference one sum), ~1e-16 relative, grown
    // by at most a few orders over 12 steps of lr 0.1 on O(1) values; 1e-12 leaves room for
    // that and would catch any error of scaling (a factor K or n / N is far above it).
    CHECK(max_abs_diff(flat_parameters(*model), flat_parameters(*ref_model)) < 1e-12);
    REQUIRE(got.metrics.size() == expected.metrics.size());
    for (std::size_t e = 0; e < got.metrics.size(); ++e)
    {
        CAPTURE(e);
        CHECK(std::abs(got.metrics[e].train_loss - expected.metrics[e].train_loss) < 1e-12);
        CHECK(got.metrics[e].train_accuracy == expected.metrics[e].train_accuracy);
        CHECK(std::abs(got.metrics[e].test_loss - expected.metrics[e].test_loss) < 1e-12);
        CHECK(got.metrics[e].test_accuracy == expected.metrics[e].test_accuracy);
    }
    // Every rank saw the global image count, and every rank reads finished files after fit().
    CHECK(got.images_per_s > 0);
    CHECK(csv_rows(out.path / "metrics.csv") == epochs);
    CHECK(fs::exists(got.checkpoint));
    CHECK(got.checkpoint == out.path / "checkpoint_epoch_3.safetensors");
    // Rank 0 alone logs.
    if (r == 0)
        CHECK(log.str().find("epoch 3/3: train loss") != std::string::npos);
    else
        CHECK(log.str().empty());

    // Resumed from the epoch-2 checkpoint (on every rank, the same file), the run ends where the
    // uninterrupted one did: the same computation, so bit for bit.
    auto resumed_model = make_model();
    dist::distributed_data_parallel resumed_ddp(resumed_model);
    optim::sgd resumed_opt(*resumed_model, sgd_for());
    data::data_loader resumed_loader(train_set, loader_for(per_rank_batch, k, r));
    train::trainer_options so = o;
    so.data_parallel = &resumed_ddp;
    so.log = nullptr;
    train::trainer resumed(*resumed_model, resumed_opt, resumed_loader, so);
    CHECK(resumed.resume(out.path / "checkpoint_epoch_2.safetensors").epoch == 2);
    const train::fit_result again = resumed.fit();
    CHECK(flat_parameters(*resumed_model) == flat_parameters(*model));
    REQUIRE(again.metrics.size() == 3);
    CHECK(again.metrics[2].train_loss == got.metrics[2].train_loss);
    CHECK(again.metrics[2].test_accuracy == got.metrics[2].test_accuracy);
}

TEST_CASE("data-parallel trainer: a test set that is a data::dataset is evaluated in shards, as one process does")
{
    const int k = dist::world_size(), r = dist::rank();
    const auto train_set = make_set(16, 21);
    // 11 examples as a tensor dataset: for K = 2, shards of 6 and 5.
    generator gen(22);
    const tensor inputs = randn({11, 1, 4, 4}, gen, dtype::float64);
    std::vector<std::int64_t> labels;
    for (int i = 0; i < 11; ++i)
        labels.push_back(static_cast<std::int64_t>(gen.below(3)));
    const auto test_set = std::make_shared<const data::tensor_dataset>(inputs,
                                                                       from_host(labels.data(), {11}, dtype::int64));

    auto ref_model = make_model();
    optim::sgd ref_opt(*ref_model, sgd_for());
    data::data_loader ref_loader(train_set, loader_for(per_rank_batch * k, 1, 0));
    train::trainer_options ro;
    ro.epochs = 2;
    ro.test_dataset = test_set;
    const train::fit_result expected = train::trainer(*ref_model, ref_opt, ref_loader, ro).fit();

    auto model = make_model();
    dist::distributed_data_parallel ddp(model);
    optim::sgd opt(*model, sgd_for());
    data::data_loader loader(train_set, loader_for(per_rank_batch, k, r));
    train::trainer_options o = ro;
    o.data_parallel = &ddp;
    const train::fit_result got = train::trainer(*model, opt, loader, o).fit();
    REQUIRE(got.metrics.size() == 2);
    for (std::size_t e = 0; e < 2; ++e)
    {
        CAPTURE(e);
        CHECK(std::isfinite(got.metrics[e].test_loss));
        // As the image test above: float64, differing by summation order only.
        CHECK(std::abs(got.metrics[e].test_loss - expected.metrics[e].test_loss) < 1e-12);
        CHECK(got.metrics[e].test_accuracy == expected.metrics[e].test_accuracy);
    }
}

TEST_CASE("data-parallel trainer: a model or loader that does not match the wrapper is refused")
{
    const int k = dist::world_size(), r = dist::rank();
    const auto train_set = make_set(10, 1);
    auto model = make_model();
    dist::distributed_data_parallel ddp(model);
    optim::sgd opt(*model, sgd_for());
    train::trainer_options o;
    o.data_parallel = &ddp;

    data::data_loader sharded(train_set, loader_for(2, k, r));
    auto other = make_model();
    optim::sgd other_opt(*other, sgd_for());
    CHECK_ERROR(train::trainer(*other, other_opt, sharded, o), xgrad::invalid_argument,
                "trainer: data_parallel must wrap the trainer's model");

    data::data_loader wrong(train_set, loader_for(2, k + 1, 0));
    const std::string loader_part = "the training loader is sharded as rank 0 of " + std::to_string(k + 1);
    const std::string group_part = "the data-parallel group is rank " + std::to_string(r) + " of " + std::to_string(k);
    CHECK_ERROR(train::trainer(*model, opt, wrong, o), xgrad::invalid_argument, loader_part.c_str(),
                group_part.c_str());

    train::trainer_options alone;
    data::data_loader shard_only(train_set, loader_for(2, 2, 0));
    CHECK_ERROR(train::trainer(*model, opt, shard_only, alone), xgrad::invalid_argument,
                "the training loader is sharded over 2 replicas, but data_parallel is not set");
}
