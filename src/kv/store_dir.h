// The KV directory itself, before the disk tier uses it: whether it can be used at all, its
// key secret (created once; a damaged or lost one never destroys data), and durable writes of
// its small files. The blocks and manifests are disk_store.h's.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kv/block_key.h"

namespace akv {

// Why `dir` cannot hold the disk tier: it, or its blocks/ or agents/ folder, cannot be created,
// or a file cannot be created in them (read-only file system, permissions, a path through a
// regular file). The text names the path and the system's reason. nullopt when usable. Creates
// the folders; leaves no other file behind.
std::optional<std::string> find_store_dir_problem(const std::string& dir);

// The store's key secret, DIR/secret: 192 random bytes and their XXH3-64 (a file of the bare
// 192 bytes, as written before the checksum, is accepted and rewritten with it). Created when
// there is none and the store is empty. When it is damaged (another size, a bad checksum), or
// missing while blocks/ or agents/ hold files, those files can never match again (their names
// are keyed by it) but are not deleted: secret, blocks/ and agents/ are moved into
// DIR/unusable-<unix seconds>/, a warning says so and how to get them back, and an empty store
// with a new secret is started. Call with the store's lock held. Throws Error{Io} naming the
// file when it cannot be read (other than missing), moved or written.
KeySecret load_or_create_store_secret(const std::string& dir);

// The secret file's bytes (the secret and its XXH3-64); the remote tier stores the fleet's
// secret in the same form. parse: nullopt unless exactly that size with a good checksum.
std::vector<std::byte> encode_store_secret(const KeySecret& secret);
std::optional<KeySecret> parse_store_secret(std::span<const std::byte> bytes);

// Makes `shared` (the fleet's secret, from the remote tier) DIR's secret. A store keyed by
// another secret (or a damaged one) is moved aside as load_or_create_store_secret does, with a
// warning: its names can never match the fleet's keys. Call with the store's lock held. Throws
// Error{Io} naming the file when it cannot be read, moved or written.
void adopt_store_secret(const std::string& dir, const KeySecret& shared);

// Writes DIR/name whole or not at all: temp file, fsync, rename, fsync of DIR. False (errno
// set, no temp file left) on failure.
bool write_file_durably(const std::string& dir, const std::string& name, std::span<const std::byte> bytes);

}  // namespace akv
