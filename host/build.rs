//! Links `libmlx5` for the hand-written mlx5dv bindings in `src/fabric/verbs/mlx5dv.rs`
//! (rdma-sys links `libibverbs` itself). Found with pkg-config: Debian's `libibverbs-dev`
//! ships `libmlx5.pc`, and `scripts/setup.sh` installs it.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if let Err(e) = pkg_config::Config::new()
        .atleast_version("1.0")
        .probe("libmlx5")
    {
        panic!(
            "pkg-config cannot find libmlx5 ({e}); install libibverbs-dev and \
             ibverbs-providers (scripts/setup.sh does)"
        );
    }
}
