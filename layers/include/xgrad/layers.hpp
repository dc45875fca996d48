#pragma once
// The neural-network layers of xgrad (namespace xgrad::nn), built on the core ops, with the
// training parts: optimizers (xgrad::optim), datasets (xgrad::data), checkpoints (xgrad::io).
#include "xgrad/data/idx.hpp"
#include "xgrad/data/loader.hpp"
#include "xgrad/io/atomic_file.hpp"
#include "xgrad/io/safetensors.hpp"
#include "xgrad/layers/activation.hpp"
#include "xgrad/layers/batch_norm.hpp"
#include "xgrad/layers/conv.hpp"
#include "xgrad/layers/init.hpp"
#include "xgrad/layers/module.hpp"
#include "xgrad/layers/pool.hpp"
#include "xgrad/layers/sequential.hpp"
#include "xgrad/layers/sync_batch_norm.hpp"
#include "xgrad/optim/lr_scheduler.hpp"
#include "xgrad/optim/optimizer.hpp"
