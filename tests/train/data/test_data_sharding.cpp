// The data_loader's sharding for data-parallel training (xgrad/data/loader.hpp): K loaders with
// ranks 0..K-1 and batch size B together yield, step by step, exactly the batches of one
// loader with batch size K*B (rank r holding the r-th B-slice), with the same number of steps
// on every rank and possibly empty batches at the end of an epoch. No MPI: the ranks are K
// loaders in one process (the sampler needs no communication).
#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "data_test_helpers.hpp"
#include "tests/support/check_error.hpp"
#include "xgrad/data/loader.hpp"
#include "xgrad/errors.hpp"
#include "xgrad/factories.hpp"
#include "xgrad/ops/shape.hpp"

using namespace xgrad;
using namespace xgrad::data;
using namespace data_test;

namespace
{
    loader_options sharded(std::int64_t batch_size, std::int64_t replicas, std::int64_t rank, bool drop_last)
    {
        loader_options o;
        o.batch_size = batch_size;
        o.num_replicas = replicas;
        o.rank = rank;
        o.drop_last = drop_last;
        o.seed = 7;
        o.mean = 0.5;
        o.std = 0.25;
        return o;
    }

}

TEST_CASE("sharding: the ranks' batches of a step, concatenated in rank order, are the one-process batch of K*B")
{
    for (const std::int64_t replicas : {1, 2, 3})
        for (const std::int64_t b : {1, 4, 5})
            // Sizes with every kind of remainder: a last global batch that is full, that covers
            // only rank 0's share partly, that leaves whole ranks empty, and a set smaller than
            // one rank's batch.
            for (const std::int64_t n : {1, 3, 23, 24, 25, 37})
                for (const bool drop_last : {false, true})
                {
                    CAPTURE(replicas);
                    CAPTURE(b);
                    CAPTURE(n);
                    CAPTURE(drop_last);
                    const auto ds = make_dataset(n);
                    data_loader whole(ds, sharded(replicas * b, 1, 0, drop_last));
                    std::vector<std::unique_ptr<data_loader>> ranks;
                    for (std::int64_t r = 0; r < replicas; ++r)
                    {
                        ranks.push_back(std::make_unique<data_loader>(ds, sharded(b, replicas, r, drop_last)));
                        CHECK(ranks.back()->batches_per_epoch() == whole.batches_per_epoch());
                    }
                    const std::int64_t expected_steps = drop_last ? n / (replicas * b)
                                                                  : (n + replicas * b - 1) / (replicas * b);
                    CHECK(whole.batches_per_epoch() == expected_steps);
                    for (const std::int64_t epoch : {0, 1, 2})
                    {
                        CAPTURE(epoch);
                        const std::vector<batch> expected = run_epoch(whole, epoch);
                        std::vector<std::vector<batch>> got;
                        for (auto& loader : ranks)
                            got.push_back(run_epoch(*loader, epoch));
                        for (std::int64_t r = 0; r < replicas; ++r)
                            REQUIRE(got[static_cast<std::size_t>(r)].size() == expected.size());
                        for (std::size_t j = 0; j < expected.size(); ++j)
                        {
                            CAPTURE(j);
                            std::vector<tensor> images, labels;
                            for (std::int64_t r = 0; r < replicas; ++r)
                            {
                                const batch& part = got[static_cast<std::size_t>(r)][j];
                                CHECK(part.index == static_cast<std::int64_t>(j));
                                CHECK(part.images.size(0) <= b);
                                CHECK(part.images.size(0) == part.labels.size(0));
                                images.push_back(part.images);
                                labels.push_back(part.labels);
                            }
                            const tensor all_images = concat(images, 0);
                            const tensor all_labels = concat(labels, 0);
                            CHECK(all_images.shape() == expected[j].images.shape());
                            CHECK(to_vector(all_images) == to_vector(expected[j].images));
                            CHECK(to_vector(all_labels) == to_vector(expected[j].labels));
                            for (auto& loader : ranks)
                                CHECK(loader->global_batch_size(static_cast<std::int64_t>(j)) ==
                                      expected[j].labels.size(0));
                        }
                    }
                }
}

TEST_CASE("sharding: ranks past the examples of the last step get empty batches of the right shape")
{
    // 4 examples, 3 ranks of 2: one step of global batch 4, ranks 0 and 1 hold 2 each, rank 2
    // none; in NHWC too, and computed on the calling thread as on the worker.
    const auto ds = make_dataset(4);
    for (const char* format : {"NCHW", "NHWC"})
        for (const bool prefetch : {true, false})
        {
            CAPTURE(format);
            CAPTURE(prefetch);
            std::vector<std::int64_t> sizes;
            for (std::int64_t r = 0; r < 3; ++r)
            {
                loader_options o = sharded(2, 3, r, false);
                o.shuffle = false;
                o.data_format = format;
                o.prefetch = prefetch;
                data_loader loader(ds, o);
                CHECK(loader.batches_per_epoch() == 1);
                CHECK(loader.global_batch_size(0) == 4);
                const std::vector<batch> epoch = run_epoch(loader, 0);
                REQUIRE(epoch.size() == 1);
                sizes.push_back(epoch[0].labels.size(0));
                const shape_type expected_shape = std::string(format) == "NCHW" ? shape_type{sizes.back(), 1, 2, 3}
                                                                                : shape_type{sizes.back(), 2, 3, 1};
                CHECK(epoch[0].images.shape() == expected_shape);
                CHECK(epoch[0].labels.shape() == shape_type{sizes.back()});
                if (r == 1)
                    CHECK(to_vector(epoch[0].labels) == std::vector<double>{2, 3});
            }
            CHECK(sizes == std::vector<std::int64_t>{2, 2, 0});
        }
    // With drop_last the incomplete global batch goes on every rank alike: no step at all.
    for (std::int64_t r = 0; r < 3; ++r)
    {
        data_loader loader(ds, sharded(2, 3, r, true));
        CHECK(loader.batches_per_epoch() == 0);
        CHECK(run_epoch(loader, 0).empty());
    }
}

TEST_CASE("sharding: bad replica counts, ranks and steps are refused with the values")
{
    const auto ds = make_dataset(10);
    CHECK_ERROR(data_loader(ds, sharded(4, 0, 0, false)), xgrad::invalid_argument,
                "data_loader: num_replicas must be >= 1, got 0");
    CHECK_ERROR(data_loader(ds, sharded(4, 2, -1, false)), xgrad::invalid_argument,
                "data_loader: rank must be in [0, num_replicas) = [0, 2), got -1");
    CHECK_ERROR(data_loader(ds, sharded(4, 2, 2, false)), xgrad::invalid_argument,
                "data_loader: rank must be in [0, num_replicas) = [0, 2), got 2");
    const std::int64_t big = std::numeric_limits<std::int64_t>::max() / 2 + 1;
    CHECK_ERROR(data_loader(ds, sharded(big, 2, 1, false)), xgrad::invalid_argument, "num_replicas * batch_size");
    data_loader loader(ds, sharded(4, 2, 1, false)); // steps of 8: 8 and 2
    CHECK(loader.batches_per_epoch() == 2);
    CHECK(loader.global_batch_size(0) == 8);
    CHECK(loader.global_batch_size(1) == 2);
    CHECK_ERROR(loader.global_batch_size(2), xgrad::invalid_argument,
                "data_loader: global_batch_size: step must be in [0, batches_per_epoch()) = [0, 2), got 2");
    CHECK_ERROR(loader.global_batch_size(-1), xgrad::invalid_argument, "got -1");
}
