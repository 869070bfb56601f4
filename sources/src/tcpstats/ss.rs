//! `ss -tin` output captured repeatedly (to be written).
