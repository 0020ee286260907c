// The accepted TCP sockets of the HTTP server, found by descriptor: cpp-httplib 0.11.4 hands no
// accepted socket to our code, and a worker blocked reading a request head (a client trickling
// bytes) or waiting for the next keep-alive request only wakes when its socket does.
//
// AcceptedSockets() scans /proc/self/fd for connected TCP sockets whose local port is the
// server's (the listening socket has no peer; the process' own client sockets have another local
// port). A descriptor may be closed by its worker right after the scan; shutdown() on a closed or
// reused descriptor that is no longer such a socket fails harmlessly, and ShutdownAcceptedSockets
// checks the port again just before it. Linux-only: elsewhere the list is empty.
//
// BytesReadFromSocket() is what the process has read from a TCP socket so far: the kernel's count
// of received bytes (TCP_INFO tcpi_bytes_received) less those still queued (SIOCINQ).
// Plain functions; thread-safe.
#pragma once

#include <cstdint>
#include <vector>

namespace tinyserve {

// The connected TCP sockets of this process with local port `local_port`.
std::vector<int> AcceptedSockets(int local_port);

// shutdown(fd, how) on every socket of AcceptedSockets(local_port) (how: SHUT_RD, SHUT_RDWR).
// Returns how many were shut.
int ShutdownAcceptedSockets(int local_port, int how);

// The bytes the process has read from TCP socket `fd`, or -1 when the kernel does not say.
int64_t BytesReadFromSocket(int fd);

// The bytes received on socket `fd` and not read yet (SIOCINQ), or -1 on an error.
int64_t QueuedBytes(int fd);

}  // namespace tinyserve
