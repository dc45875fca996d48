#pragma once
// Data-parallel training (namespace xgrad::distributed), over MPI when the build has it
// (XGRAD_USE_MPI), else for a world of one process; docs/distributed.md explains it:
//   xgrad/distributed/comm.hpp             init/finalize/environment, abort, process groups, the
//                                          collectives on tensors, the differentiable all-reduce
//   xgrad/distributed/data_parallel.hpp    distributed_data_parallel: a module's gradients averaged
//                                          over the ranks in buckets, during backward
//   xgrad/distributed/sync_batch_norm.hpp  batch norm with the statistics of every rank (the op of
//                                          nn::sync_batch_norm2d, in xgrad/layers/sync_batch_norm.hpp)
#include "xgrad/distributed/comm.hpp"
#include "xgrad/distributed/data_parallel.hpp"
#include "xgrad/distributed/sync_batch_norm.hpp"
#include "xgrad/layers/sync_batch_norm.hpp"
