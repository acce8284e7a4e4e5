// The MPI member of the check macro family (core/error.h): EMBER_MPI_CHECK evaluates an MPI call once and reports
// the statement, file:line, rank, host and MPI's own message. Only src/parallel and the GPU communicators call MPI.
#pragma once

#include <mpi.h>

#include <string>

#include "core/error.h"

namespace ember {

// MPI's text for an error code.
std::string mpi_error_string(int code);

}  // namespace ember

#define EMBER_MPI_CHECK(stmt)                                                                  \
  EMBER_CHECK_GEN("MPI", stmt, ember_rc_ == MPI_SUCCESS, ::ember::mpi_error_string(ember_rc_), \
                  "check the MPI launch and network")
