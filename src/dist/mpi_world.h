// The MPI communicator (mpi.cpp), for world() alone; built only with -DQKV_MPI=ON.
#pragma once

#include "qkv/dist/communicator.h"

namespace qkv::dist {
#ifdef QKV_HAVE_MPI
Communicator& mpi_world();
#endif
}  // namespace qkv::dist
