//! Builds the admin console (`console/`, TypeScript with Vite) and embeds
//! it in the binary, which serves it under `/console/`.
//!
//! - `BRAINSTEM_CONSOLE_DIST` names a console already built (the test
//!   script builds it once per source hash, outside the clone): embedded
//!   as it is.
//! - Otherwise, with Node ≥ 20.19 and npm on the PATH, `npm ci` (once per
//!   lock file) and `npm run build` write it into `OUT_DIR`.
//! - Otherwise nothing is embedded, and `/console/` answers with a page
//!   that says how to get it. The build never fails for want of Node.
//!
//! `console_assets.rs` in `OUT_DIR` lists `EmbeddedFile`s (path, bytes, gzip, brotli) for
//! every file: text files (scripts, styles, HTML, SVG, JSON) are also
//! compressed here, once, at the highest levels (gzip 9, brotli 11), so
//! that the server never compresses them per request; an empty slice
//! means the file is served only as it is (images, fonts: already
//! compressed).

use std::{
    env, fs,
    path::{Path, PathBuf},
    process::Command,
};

fn main() {
    for input in [
        "console/src",
        "console/index.html",
        "console/graphiql.html",
        "console/package.json",
        "console/package-lock.json",
        "console/vite.config.ts",
        "console/tsconfig.json",
    ] {
        println!("cargo:rerun-if-changed={input}");
    }
    println!("cargo:rerun-if-env-changed=BRAINSTEM_CONSOLE_DIST");
    let out = PathBuf::from(env::var("OUT_DIR").unwrap_or_else(|_| ".".into()));
    let dist = match env::var("BRAINSTEM_CONSOLE_DIST") {
        Ok(dir) if Path::new(&dir).join("index.html").is_file() => {
            // A new build there (new asset names) must list its files again.
            println!("cargo:rerun-if-changed={dir}");
            println!("cargo:rerun-if-changed={dir}/assets");
            Some(PathBuf::from(dir))
        }
        _ => build(&out.join("console")),
    };
    let mut files = Vec::new();
    if let Some(dist) = &dist {
        collect(dist, dist, &mut files);
    }
    files.sort();
    let mut code = String::from(
        "/// The built console's files, by path under its root: the bytes, then\n\
         /// their gzip and brotli forms (empty when not compressed).\n\
         pub static ASSETS: &[EmbeddedFile] = &[\n",
    );
    let compressed_dir = out.join("console-compressed");
    for (path, full) in &files {
        let (gzip, brotli) = match compress(full, &compressed_dir.join(path)) {
            Some((gz, br)) => (
                format!("include_bytes!({:?})", gz.display().to_string()),
                format!("include_bytes!({:?})", br.display().to_string()),
            ),
            None => ("&[]".to_owned(), "&[]".to_owned()),
        };
        code.push_str(&format!(
            "    EmbeddedFile {{ path: {path:?}, bytes: include_bytes!({full:?}), gzip: {gzip}, brotli: {brotli} }},\n"
        ));
    }
    code.push_str("];\n");
    if let Err(err) = fs::write(out.join("console_assets.rs"), code) {
        println!("cargo:warning=cannot write console_assets.rs: {err}");
    }
}

/// Build the console into `target`; `None` (with a warning) when Node or
/// npm is missing or the build fails.
fn build(target: &Path) -> Option<PathBuf> {
    let console = Path::new("console");
    let npm_works = Command::new("npm")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !npm_works {
        println!(
            "cargo:warning=npm is not on the PATH: the console is not built (see README, Admin console)"
        );
        return None;
    }
    let installed = console.join("node_modules/.package-lock.json");
    let lock = console.join("package-lock.json");
    let stale = match (fs::metadata(&installed), fs::metadata(&lock)) {
        (Ok(i), Ok(l)) => match (i.modified(), l.modified()) {
            (Ok(i), Ok(l)) => i < l,
            _ => true,
        },
        _ => true,
    };
    if stale
        && !run(Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
            .current_dir(console))
    {
        return None;
    }
    let built = run(Command::new("npm")
        .args(["run", "build", "--silent"])
        .env("CONSOLE_OUT_DIR", target)
        .current_dir(console));
    (built && target.join("index.html").is_file()).then(|| target.to_path_buf())
}

fn run(command: &mut Command) -> bool {
    match command.output() {
        Ok(o) if o.status.success() => true,
        Ok(o) => {
            let stderr = String::from_utf8_lossy(&o.stderr);
            let stdout = String::from_utf8_lossy(&o.stdout);
            for line in stdout.lines().chain(stderr.lines()).take(20) {
                println!("cargo:warning=console: {line}");
            }
            false
        }
        Err(err) => {
            println!("cargo:warning=console: {err}");
            false
        }
    }
}

/// Write `<target>.gz` and `<target>.br` for the text file `source`;
/// `None` for other files, or when compressing fails (then the file is
/// served as it is).
fn compress(source: &str, target: &Path) -> Option<(PathBuf, PathBuf)> {
    use std::io::Write;
    let text = [".js", ".css", ".html", ".svg", ".json", ".map", ".txt"];
    if !text.iter().any(|ext| source.ends_with(ext)) {
        return None;
    }
    let bytes = fs::read(source).ok()?;
    fs::create_dir_all(target.parent()?).ok()?;
    let gz = target.with_file_name(format!("{}.gz", target.file_name()?.to_string_lossy()));
    let br = target.with_file_name(format!("{}.br", target.file_name()?.to_string_lossy()));
    let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gzip.write_all(&bytes).ok()?;
    fs::write(&gz, gzip.finish().ok()?).ok()?;
    let mut brotli = Vec::new();
    let params = brotli::enc::BrotliEncoderParams {
        quality: 11,
        lgwin: 22,
        ..Default::default()
    };
    brotli::BrotliCompress(&mut bytes.as_slice(), &mut brotli, &params).ok()?;
    fs::write(&br, brotli).ok()?;
    Some((gz, br))
}

fn collect(root: &Path, dir: &Path, files: &mut Vec<(String, String)>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect(root, &path, files);
        } else if let (Ok(relative), Ok(full)) = (path.strip_prefix(root), path.canonicalize()) {
            files.push((
                relative.to_string_lossy().replace('\\', "/"),
                full.to_string_lossy().into_owned(),
            ));
        }
    }
}
