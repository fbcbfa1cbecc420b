// Opening a file for writing where another account may have put something
// in the way. tcpscope writes its flow log as root into a directory the
// package gives to the `tcpscope` user, and `compare --plot` writes wherever
// it is told: a symlink there would turn the write into one to its target,
// a FIFO would block the writer forever, and a file someone else owns or can
// write (or a hard link to one) is not ours to append to.
#pragma once

#include <string>

namespace tcpscope {

enum class OwnedFileMode { kAppend, kTruncate };

// Opens `path` write-only (creating it 0640), refusing the last component if
// it is a symlink, not a regular file, not owned by this process's effective
// uid, writable by group or others, or linked more than once. Nothing is
// truncated before those checks pass, and the open never blocks. Returns the
// fd (close-on-exec), or -1 with *error = "PATH: why".
int open_owned_file(const std::string& path, OwnedFileMode mode, std::string* error);

}  // namespace tcpscope
