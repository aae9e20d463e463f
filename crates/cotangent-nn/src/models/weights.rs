//! Reading a Hugging Face folder's safetensors weights one tensor at a time, and writing them.
//!
//! Each file's header is read and checked first; then only the bytes of each wanted tensor are
//! read (a seek and one read per tensor), converted to the model's dtype and evaluated, so the
//! host holds at most one source tensor besides the converted parameters.
use cotangent::{Array, DType, Error, Result};
use serde_json::Value;
use std::collections::{BTreeSet, HashMap};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// The largest safetensors header read (100 MB, safetensors' own limit).
const MAX_HEADER: u64 = 100_000_000;

/// One tensor declared by a file's header.
#[derive(Clone, Debug)]
pub(crate) struct TensorInfo {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<usize>,
    /// Absolute byte range in the file.
    pub start: u64,
    pub end: u64,
}

fn io_err(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::Io(format!("{}: {e}", path.display()))
}

fn parse_dtype(s: &str) -> Option<DType> {
    Some(match s {
        "BOOL" => DType::Bool,
        "U8" => DType::U8,
        "U32" => DType::U32,
        "I32" => DType::I32,
        "I64" => DType::I64,
        "F16" => DType::F16,
        "BF16" => DType::BF16,
        "F32" => DType::F32,
        "F64" => DType::F64,
        _ => return None,
    })
}

fn dtype_size(d: DType) -> usize {
    match d {
        DType::Bool | DType::U8 => 1,
        DType::F16 | DType::BF16 => 2,
        DType::U32 | DType::I32 | DType::F32 => 4,
        DType::I64 | DType::F64 => 8,
    }
}

/// The checked header of a safetensors file: every tensor's dtype, shape and byte range, the
/// ranges inside the file and of the size the shape and dtype need.
pub(crate) fn read_header(path: &Path) -> Result<Vec<TensorInfo>> {
    let mut file = File::open(path).map_err(|e| io_err(path, e))?;
    let len = file.metadata().map_err(|e| io_err(path, e))?.len();
    let mut n = [0u8; 8];
    file.read_exact(&mut n).map_err(|e| io_err(path, format!("reading the header length: {e}")))?;
    let n = u64::from_le_bytes(n);
    if n > MAX_HEADER || n.checked_add(8).is_none_or(|end| end > len) {
        return Err(io_err(path, format!("header length {n} does not fit the file of {len} bytes")));
    }
    let mut header = vec![0u8; n as usize];
    file.read_exact(&mut header).map_err(|e| io_err(path, e))?;
    let json: Value = serde_json::from_slice(&header).map_err(|e| io_err(path, format!("header is not JSON: {e}")))?;
    let obj = json.as_object().ok_or_else(|| io_err(path, "header is not a JSON object"))?;
    let data_start = 8 + n;
    let mut out = Vec::with_capacity(obj.len());
    for (name, entry) in obj {
        if name == "__metadata__" {
            continue;
        }
        let bad = |what: &str| io_err(path, format!("tensor `{name}`: {what}"));
        let dtype_s = entry.get("dtype").and_then(Value::as_str).ok_or_else(|| bad("no dtype"))?;
        let dtype = parse_dtype(dtype_s).ok_or_else(|| bad(&format!("dtype {dtype_s} is not supported")))?;
        let shape: Vec<usize> = entry
            .get("shape")
            .and_then(Value::as_array)
            .filter(|s| s.len() <= crate::io::MAX_RANK)
            .and_then(|s| s.iter().map(|d| d.as_u64().map(|d| d as usize)).collect())
            .ok_or_else(|| bad("shape is not a list of at most 64 sizes"))?;
        let offsets: Vec<u64> = entry
            .get("data_offsets")
            .and_then(Value::as_array)
            .and_then(|o| o.iter().map(Value::as_u64).collect())
            .filter(|o: &Vec<u64>| o.len() == 2)
            .ok_or_else(|| bad("data_offsets is not two integers"))?;
        let bytes = shape
            .iter()
            .try_fold(dtype_size(dtype) as u64, |acc, &d| acc.checked_mul(d as u64))
            .ok_or_else(|| bad("size overflows"))?;
        let (s, e) = (offsets[0], offsets[1]);
        if e < s || e - s != bytes || data_start.checked_add(e).is_none_or(|end| end > len) {
            return Err(bad(&format!(
                "data_offsets [{s}, {e}] do not hold {bytes} bytes of {dtype_s} {shape:?} inside the file's {} data \
                 bytes",
                len - data_start
            )));
        }
        out.push(TensorInfo { name: name.clone(), dtype, shape, start: data_start + s, end: data_start + e });
    }
    out.sort_by_key(|t| t.start);
    Ok(out)
}

/// Read one tensor's bytes from `file` as an array of its file dtype.
pub(crate) fn read_tensor(file: &mut File, path: &Path, t: &TensorInfo) -> Result<Array> {
    let mut bytes = vec![0u8; (t.end - t.start) as usize];
    file.seek(SeekFrom::Start(t.start)).map_err(|e| io_err(path, e))?;
    file.read_exact(&mut bytes).map_err(|e| io_err(path, format!("tensor `{}`: {e}", t.name)))?;
    Ok(from_le_bytes(&bytes, &t.shape, t.dtype))
}

fn from_le_bytes(bytes: &[u8], shape: &[usize], dtype: DType) -> Array {
    macro_rules! le {
        ($t:ty, $n:expr) => {
            Array::from_vec(
                bytes.chunks_exact($n).map(|c| <$t>::from_le_bytes(c.try_into().unwrap())).collect::<Vec<$t>>(),
                shape,
            )
        };
    }
    match dtype {
        DType::Bool => Array::from_vec(bytes.iter().map(|&b| b != 0).collect::<Vec<bool>>(), shape),
        DType::U8 => Array::from_vec(bytes.to_vec(), shape),
        DType::U32 => le!(u32, 4),
        DType::I32 => le!(i32, 4),
        DType::I64 => le!(i64, 8),
        DType::F16 => le!(half::f16, 2),
        DType::BF16 => le!(half::bf16, 2),
        DType::F32 => le!(f32, 4),
        DType::F64 => le!(f64, 8),
    }
}

/// The weight files of a folder: `model.safetensors`, or the shards that
/// `model.safetensors.index.json` lists (each once, in order of first mention).
pub(crate) fn weight_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let index = dir.join("model.safetensors.index.json");
    if index.is_file() {
        let text = std::fs::read_to_string(&index).map_err(|e| io_err(&index, e))?;
        let json: Value = serde_json::from_str(&text).map_err(|e| io_err(&index, format!("not valid JSON: {e}")))?;
        let map = json
            .get("weight_map")
            .and_then(Value::as_object)
            .ok_or_else(|| io_err(&index, "no `weight_map` object"))?;
        let mut seen = BTreeSet::new();
        let mut files = Vec::new();
        for (name, file) in map {
            let file =
                file.as_str().ok_or_else(|| io_err(&index, format!("`{name}` maps to {file}, not a file name")))?;
            if file.contains('/') || file.contains('\\') || file == ".." {
                return Err(io_err(&index, format!("shard `{file}` is not a file name in the folder")));
            }
            if seen.insert(file.to_string()) {
                files.push(dir.join(file));
            }
        }
        files.sort();
        return Ok(files);
    }
    let single = dir.join("model.safetensors");
    if single.is_file() {
        return Ok(vec![single]);
    }
    Err(Error::Io(format!("{}: neither model.safetensors nor model.safetensors.index.json is there", dir.display())))
}

/// What loading expects: each parameter's full name with its shape.
pub(crate) type Expected = HashMap<String, Vec<usize>>;

/// Read every expected tensor of `files`, converted to `dtype`, under the name `rename` gives
/// the file's name (`None`: skip the tensor). Stacked expert tensors (`mlp.experts.gate_up_proj` `[E, 2I, H]`,
/// `mlp.experts.down_proj` `[E, H, I]`) are split into the per-expert names. Every unexpected,
/// mis-shaped and missing tensor is named in one `Err`.
pub(crate) fn load_tensors(
    files: &[PathBuf],
    expected: &Expected,
    dtype: DType,
    rename: impl Fn(&str) -> Option<String>,
) -> Result<HashMap<String, Array>> {
    let mut found: HashMap<String, Array> = HashMap::new();
    let mut problems = Vec::new();
    let take = |name: String, a: Array, problems: &mut Vec<String>, found: &mut HashMap<String, Array>| -> Result<()> {
        match expected.get(&name) {
            None => problems.push(format!("unexpected tensor `{name}` {:?}", a.shape())),
            Some(shape) if shape.as_slice() != a.shape() => {
                problems.push(format!("tensor `{name}` has shape {:?}, the model expects {shape:?}", a.shape()))
            }
            Some(_) if found.contains_key(&name) => problems.push(format!("tensor `{name}` appears twice")),
            Some(_) => {
                let converted = a.astype(dtype);
                converted.eval()?;
                found.insert(name, converted);
            }
        }
        Ok(())
    };
    for path in files {
        let header = read_header(path)?;
        let mut file = File::open(path).map_err(|e| io_err(path, e))?;
        for t in &header {
            let Some(name) = rename(&t.name) else { continue };
            let stacked = [("mlp.experts.gate_up_proj", 2usize), ("mlp.experts.down_proj", 1)]
                .into_iter()
                .find(|(suffix, _)| name.ends_with(suffix) && t.shape.len() == 3);
            if let Some((suffix, parts)) = stacked {
                let base = &name[..name.len() - suffix.len()];
                let a = read_tensor(&mut file, path, t)?;
                let (e, rows) = (t.shape[0], t.shape[1]);
                if rows % parts != 0 {
                    problems.push(format!("stacked tensor `{}` {:?} does not split in {parts}", t.name, t.shape));
                    continue;
                }
                let names: &[&str] = if parts == 2 { &["gate_proj", "up_proj"] } else { &["down_proj"] };
                for i in 0..e {
                    let expert = a.slice_axis(0, Some(i as isize), Some(i as isize + 1), 1).squeeze(&[0]);
                    let pieces = expert.split(parts, 0);
                    for (piece, n) in pieces.into_iter().zip(names) {
                        take(format!("{base}mlp.experts.{i}.{n}.weight"), piece, &mut problems, &mut found)?;
                    }
                }
                continue;
            }
            // check names and shapes before reading the bytes
            match expected.get(&name) {
                Some(shape) if shape == &t.shape && !found.contains_key(&name) => {
                    let a = read_tensor(&mut file, path, t)?;
                    take(name, a, &mut problems, &mut found)?;
                }
                _ => {
                    let placeholder = cotangent::zeros(&t.shape, DType::U8);
                    take(name, placeholder, &mut problems, &mut found)?;
                }
            }
        }
    }
    let mut missing: Vec<&String> = expected.keys().filter(|k| !found.contains_key(*k)).collect();
    missing.sort();
    problems.extend(missing.into_iter().map(|m| format!("missing tensor `{m}` {:?}", expected[m])));
    if !problems.is_empty() {
        let files: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
        return Err(Error::Other(format!(
            "loading {}: {} problem(s): {}",
            files.join(", "),
            problems.len(),
            problems.join("; ")
        )));
    }
    Ok(found)
}
