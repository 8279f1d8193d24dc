//! Where rank 0's results go: stdout (the table) and the `-J` file (JSON).

use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use crate::error::BenchError;
use crate::plot;
use crate::report::{self, SizeReport};
use crate::spec::BenchSpec;

/// Writes to stdout, ignoring a closed pipe (`rcoll-bench ... | head`).
pub fn print(s: &str) {
    print_bytes(s.as_bytes());
}

/// [`print()`] for bytes relayed from a rank process.
pub fn print_bytes(bytes: &[u8]) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(bytes).and_then(|()| out.flush());
}

/// The `-J` file, created before the run so that a bad path fails before it, not after.
pub struct JsonFile {
    path: PathBuf,
    file: File,
}

impl JsonFile {
    /// Creates (or truncates) the file `spec` names, if any.
    pub fn create(spec: &BenchSpec) -> Result<Option<JsonFile>, BenchError> {
        spec.json
            .as_ref()
            .map(|path| {
                let file = File::create(path).map_err(|e| write_error(path, e))?;
                Ok(JsonFile {
                    path: path.clone(),
                    file,
                })
            })
            .transpose()
    }
}

/// Everything rank 0 will write after the run, checked (and created) before it: the
/// `-J` file, and the `--plot` chart's name and font.
pub fn open(spec: &BenchSpec) -> Result<Option<JsonFile>, BenchError> {
    if let Some(path) = &spec.plot {
        plot::prepare(path)?;
    }
    JsonFile::create(spec)
}

/// After the last row: the footer, the JSON file, and an error if any element was wrong.
pub fn conclude(
    spec: &BenchSpec,
    reports: &[SizeReport],
    json: Option<JsonFile>,
) -> Result<(), BenchError> {
    print(&report::footer(spec, reports));
    if let Some(JsonFile { path, mut file }) = json {
        let text = report::json(reports)? + "\n";
        file.write_all(text.as_bytes())
            .map_err(|e| write_error(&path, e))?;
    }
    if let Some(path) = &spec.plot {
        plot::run_chart(spec, reports, path)?;
    }
    match report::total_wrong(reports) {
        0 => Ok(()),
        n => Err(BenchError::Wrong(n)),
    }
}

fn write_error(path: &Path, source: std::io::Error) -> BenchError {
    BenchError::Write {
        path: path.to_owned(),
        source,
    }
}
