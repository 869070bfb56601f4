//! Live TCP statistics through NETLINK_SOCK_DIAG (to be written).
