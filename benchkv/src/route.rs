//! How a request travels (docs/spec/benchkv.md#backends): which backend carries a client's remote
//! requests, and which daemon of a rank holds the endpoint to another rank.

/// How a client's requests for other ranks leave its rank (`--backend`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// Through ipc and Flux to the endpoint's daemon (docs/spec/benchkv.md#backends).
    Meta,
    /// Through the delegation ring to daemon#0 (docs/spec/benchkv.md#backends).
    Delegation,
}

impl Backend {
    /// The command-line spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Meta => "meta",
            Self::Delegation => "delegation",
        }
    }
}

/// The daemon that holds rank `rank`'s endpoint (docs/spec/benchkv.md#backends).
pub fn endpoint_daemon(backend: Backend, rank: u32, daemons: usize) -> usize {
    match backend {
        Backend::Delegation => 0,
        Backend::Meta => rank as usize % daemons,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_spread_by_backend() {
        assert_eq!(endpoint_daemon(Backend::Delegation, 5, 3), 0);
        assert_eq!(endpoint_daemon(Backend::Meta, 5, 3), 2);
        assert_eq!(endpoint_daemon(Backend::Meta, 3, 3), 0);
    }
}
