//! Records the git commit the binary was built from, for `tickwire --version`
//! ("unknown" outside a git checkout, e.g. a crates.io tarball).

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn main() {
    let hash = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    // (Not whether the tree has uncommitted changes: that would rebuild
    // the binary on every `git add`.)
    println!("cargo:rustc-env=TICKWIRE_GIT_HASH={hash}");
    // HEAD moves on checkout and commit; the ref it names moves on commit.
    if let Some(git_dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        println!("cargo:rerun-if-changed={git_dir}/HEAD");
        if let Some(r) = git(&["symbolic-ref", "-q", "HEAD"]) {
            println!("cargo:rerun-if-changed={git_dir}/{r}");
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}
