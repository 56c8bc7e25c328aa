// The whole public API of qkv.
#pragma once

#include "qkv/autograd/grad_mode.h"
#include "qkv/autograd/gradcheck.h"
#include "qkv/autograd/node.h"
#include "qkv/core/parallel.h"
#include "qkv/core/rng.h"
#include "qkv/core/tensor.h"
#include "qkv/nn/init.h"
#include "qkv/nn/linear.h"
#include "qkv/nn/module.h"
#include "qkv/nn/multihead_attention.h"
#include "qkv/ops.h"
