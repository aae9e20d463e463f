//! Saving and loading parameter trees as [safetensors](https://github.com/huggingface/safetensors)
//! files (`f32`, `f64`, `f16`, `bf16`, and the integer dtypes).
//!
//! Tensor names are the dotted leaf names of the tree. The tree's leaf order is stored in the
//! file's metadata (`cotangent.order`) so [`load`] rebuilds the same order.
use crate::module::{problems_error, Assign};
use crate::{Module, Tree, Visitor};
use cotangent::{Array, DType, Error, Result};
use safetensors::Dtype;
use std::collections::HashMap;
use std::path::Path;

const ORDER_KEY: &str = "cotangent.order";

fn st_dtype(d: DType) -> Result<Dtype> {
    Ok(match d {
        DType::Bool => Dtype::BOOL,
        DType::U8 => Dtype::U8,
        DType::U32 => Dtype::U32,
        DType::I32 => Dtype::I32,
        DType::I64 => Dtype::I64,
        DType::F16 => Dtype::F16,
        DType::BF16 => Dtype::BF16,
        DType::F32 => Dtype::F32,
        DType::F64 => Dtype::F64,
    })
}

fn to_bytes(a: &Array) -> Result<Vec<u8>> {
    macro_rules! le {
        ($t:ty) => {
            a.to_vec::<$t>()?.iter().flat_map(|x| x.to_le_bytes()).collect()
        };
    }
    Ok(match a.dtype() {
        DType::Bool => a.to_vec::<bool>()?.iter().map(|&b| b as u8).collect(),
        DType::U8 => a.to_vec::<u8>()?,
        DType::U32 => le!(u32),
        DType::I32 => le!(i32),
        DType::I64 => le!(i64),
        DType::F16 => le!(half::f16),
        DType::BF16 => le!(half::bf16),
        DType::F32 => le!(f32),
        DType::F64 => le!(f64),
    })
}

fn from_bytes(bytes: &[u8], shape: &[usize], dtype: DType) -> Array {
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

/// Serialize `tree` to safetensors bytes; float leaves are converted to `float_dtype` if given
/// (e.g. `Some(DType::BF16)` to halve a checkpoint).
pub fn to_safetensors_bytes(tree: &Tree, float_dtype: Option<DType>) -> Result<Vec<u8>> {
    to_safetensors_bytes_with_metadata(tree, float_dtype, &HashMap::new())
}

/// [`to_safetensors_bytes`] with extra string metadata (e.g. a model's configuration; read it
/// back with [`load_metadata`]).
pub fn to_safetensors_bytes_with_metadata(
    tree: &Tree,
    float_dtype: Option<DType>,
    metadata: &HashMap<String, String>,
) -> Result<Vec<u8>> {
    named_to_safetensors_bytes(&tree.flatten(), float_dtype, metadata)
}

/// Serialize `(name, array)` pairs, in this order, to safetensors bytes (the order is kept in
/// the metadata, as for a tree).
fn named_to_safetensors_bytes(
    flat: &[(String, Array)],
    float_dtype: Option<DType>,
    metadata: &HashMap<String, String>,
) -> Result<Vec<u8>> {
    let mut owned = Vec::with_capacity(flat.len());
    for (name, a) in flat {
        let a = match float_dtype {
            Some(d) if a.dtype().is_float() => a.astype(d),
            _ => a.clone(),
        };
        owned.push((name.clone(), st_dtype(a.dtype())?, a.shape().to_vec(), to_bytes(&a)?));
    }
    let views = owned
        .iter()
        .map(|(n, d, s, b)| {
            safetensors::tensor::TensorView::new(*d, s.clone(), b)
                .map(|v| (n.clone(), v))
                .map_err(|e| Error::Io(format!("safetensors: tensor `{n}`: {e}")))
        })
        .collect::<Result<Vec<_>>>()?;
    let order = flat.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join("\n");
    let mut meta = metadata.clone();
    meta.insert(ORDER_KEY.to_string(), order);
    safetensors::serialize(views, Some(meta)).map_err(|e| Error::Io(format!("safetensors: {e}")))
}

/// Write `tree` to a safetensors file (see [`to_safetensors_bytes`]).
pub fn save(path: impl AsRef<Path>, tree: &Tree, float_dtype: Option<DType>) -> Result<()> {
    save_with_metadata(path, tree, float_dtype, &HashMap::new())
}

/// Write `tree` and string `metadata` to a safetensors file.
///
/// ```
/// use std::collections::HashMap;
/// use cotangent::Array;
/// use cotangent_nn::{io, Tree};
/// let path = std::env::temp_dir().join(format!("doc_save_meta_{}.safetensors", std::process::id()));
/// let tree = Tree::dict([("w", Tree::leaf(Array::scalar(1.0f32)))]);
/// let meta = HashMap::from([("hidden_size".to_string(), "64".to_string())]);
/// io::save_with_metadata(&path, &tree, None, &meta).unwrap();
/// assert_eq!(io::load_metadata(&path).unwrap()["hidden_size"], "64");
/// # std::fs::remove_file(&path).ok();
/// ```
pub fn save_with_metadata(
    path: impl AsRef<Path>,
    tree: &Tree,
    float_dtype: Option<DType>,
    metadata: &HashMap<String, String>,
) -> Result<()> {
    let bytes = to_safetensors_bytes_with_metadata(tree, float_dtype, metadata)?;
    write_file(path.as_ref(), bytes)
}

fn write_file(path: &Path, bytes: Vec<u8>) -> Result<()> {
    std::fs::write(path, bytes).map_err(|e| Error::Io(format!("writing {}: {e}", path.display())))
}

/// Save the parameters of `model` (frozen ones included) to a safetensors file, each named
/// `prefix` + its parameter name: the counterpart of [`load_into_with_prefix`], e.g. to write
/// one decoder layer under `"model.layers.3."`. Float parameters are converted to
/// `float_dtype` if given.
///
/// ```
/// use cotangent::{self as ct, DType};
/// use cotangent_nn::{io, Linear, Module};
/// let path = std::env::temp_dir().join(format!("doc_save_prefix_{}.safetensors", std::process::id()));
/// let layer = Linear::new(&ct::random::key(0), 3, 2, true, DType::F32);
/// io::save_with_prefix(&layer, &path, "model.fc1.", None).unwrap();
/// assert_eq!(io::load(&path).unwrap().names(), ["model.fc1.weight", "model.fc1.bias"]);
/// let mut back = Linear::new(&ct::random::key(1), 3, 2, true, DType::F32);
/// io::load_into_with_prefix(&mut back, &path, "model.fc1.").unwrap();
/// assert_eq!(back.weight.to_vec::<f32>().unwrap(), layer.weight.to_vec::<f32>().unwrap());
/// # std::fs::remove_file(&path).ok();
/// ```
pub fn save_with_prefix<M: Module>(
    model: &M,
    path: impl AsRef<Path>,
    prefix: &str,
    float_dtype: Option<DType>,
) -> Result<()> {
    let flat: Vec<(String, Array)> =
        model.parameters().flatten().into_iter().map(|(name, a)| (format!("{prefix}{name}"), a)).collect();
    let bytes = named_to_safetensors_bytes(&flat, float_dtype, &HashMap::new())?;
    write_file(path.as_ref(), bytes)
}

/// Parse safetensors bytes into a tree. A truncated or malformed buffer is an `Err` that says
/// what is wrong, never a panic: the header is checked against the data before anything it
/// declares is read or allocated (a header length beyond the buffer, offsets out of range or
/// overlapping, a shape or dtype that disagrees with the byte count, sizes that overflow,
/// duplicate names, a shape of more than [`MAX_RANK`] dimensions), so nothing larger than the
/// buffer is allocated.
///
/// ```
/// use cotangent_nn::io::from_safetensors_bytes;
/// // a header declaring 2^62 bytes of f32 in a 100-byte buffer
/// let header = br#"{"w":{"dtype":"F32","shape":[1152921504606846976],"data_offsets":[0,4611686018427387904]}}"#;
/// let mut file = (header.len() as u64).to_le_bytes().to_vec();
/// file.extend_from_slice(header);
/// file.resize(file.len() + 16, 0);
/// let err = from_safetensors_bytes(&file).unwrap_err().to_string();
/// assert!(err.contains("tensor `w` has data_offsets"), "{err}");
/// ```
pub fn from_safetensors_bytes(bytes: &[u8]) -> Result<Tree> {
    Tree::unflatten(named_tensors_from_bytes(bytes, |_| true)?)
}

/// The tensors of safetensors bytes whose names satisfy `keep`, with their names, in the file's
/// stored leaf order (see the module docs) or else sorted by name. Only the kept tensors are
/// converted, so one layer can be read out of a large checkpoint.
///
/// ```
/// use cotangent::Array;
/// use cotangent_nn::{io, Tree};
/// let tree = Tree::dict([
///     ("a", Tree::leaf(Array::scalar(1.0f32))),
///     ("b", Tree::leaf(Array::scalar(2.0f32))),
/// ]);
/// let bytes = io::to_safetensors_bytes(&tree, None).unwrap();
/// let kept = io::named_tensors_from_bytes(&bytes, |name| name == "b").unwrap();
/// assert_eq!(kept.len(), 1);
/// assert_eq!(kept[0].0, "b");
/// ```
pub fn named_tensors_from_bytes(bytes: &[u8], keep: impl Fn(&str) -> bool) -> Result<Vec<(String, Array)>> {
    let header = checked_header(bytes)?;
    let mut names: Vec<&str> = header.tensors.iter().map(|t| t.name.as_str()).collect();
    names.sort_unstable();
    if let Some(order) = header.metadata.get(ORDER_KEY) {
        let stored: Vec<&str> = order.split('\n').filter(|s| !s.is_empty()).collect();
        let mut sorted = stored.clone();
        sorted.sort_unstable();
        if sorted == names {
            names = stored;
        }
    }
    let by_name: HashMap<&str, &TensorEntry> = header.tensors.iter().map(|t| (t.name.as_str(), t)).collect();
    let mut items = Vec::new();
    for name in names.into_iter().filter(|n| keep(n)) {
        let t = by_name[name];
        items.push((name.to_string(), from_bytes(&header.data[t.start..t.end], &t.shape, t.dtype)));
    }
    Ok(items)
}

/// The most dimensions a tensor of a safetensors file may declare (bounds what parsing a shape
/// allocates).
pub const MAX_RANK: usize = 64;

/// One tensor of a checked header: its bytes are `data[start..end]`, exactly `shape`'s element
/// count times `dtype`'s size.
struct TensorEntry {
    name: String,
    dtype: DType,
    shape: Vec<usize>,
    start: usize,
    end: usize,
}

/// A safetensors buffer whose header has been checked against the data it describes.
struct CheckedHeader<'a> {
    metadata: HashMap<String, String>,
    tensors: Vec<TensorEntry>,
    data: &'a [u8],
}

/// Parses and checks the header of safetensors `bytes` before anything is read or allocated
/// from what it declares: the header length fits the buffer; the header is UTF-8 JSON, an object
/// whose names are distinct; every tensor has a dtype cotangent supports, a shape that an
/// array can have (see [`cotangent::shape::shape_problem`]) and `data_offsets` inside the data
/// holding exactly its byte count; and the tensors tile the data without overlaps, gaps or
/// trailing bytes (the layout the format prescribes). All arithmetic on declared sizes is
/// checked, so no value in a file can overflow, panic or size an allocation.
fn checked_header(bytes: &[u8]) -> Result<CheckedHeader<'_>> {
    let bad = |m: String| Error::Io(format!("malformed safetensors data: {m}"));
    let Some((len_bytes, rest)) = bytes.split_first_chunk::<8>() else {
        return Err(bad(format!("{} bytes, fewer than the 8 of the header length", bytes.len())));
    };
    let n = u64::from_le_bytes(*len_bytes);
    let n = match usize::try_from(n) {
        Ok(n) if n <= rest.len() => n,
        _ => return Err(bad(format!("the header length {n} exceeds the {} bytes after it", rest.len()))),
    };
    let (text, data) = rest.split_at(n);
    let text = std::str::from_utf8(text)
        .map_err(|e| bad(format!("the header is not UTF-8 (byte {} of the header)", e.valid_up_to())))?;
    let raw: RawHeader = serde_json::from_str(text).map_err(|e| bad(format!("header: {e}")))?;

    let mut tensors = Vec::with_capacity(raw.tensors.len());
    for (name, t) in raw.tensors {
        let what = || format!("tensor `{name}`");
        let dtype = dtype_from_name(&t.dtype)
            .ok_or_else(|| Error::Io(format!("safetensors: {} has unsupported dtype {:?}", what(), t.dtype)))?;
        let shape = t
            .shape
            .iter()
            .map(|&d| usize::try_from(d))
            .collect::<std::result::Result<Vec<usize>, _>>()
            .map_err(|_| bad(format!("{} has shape {:?}: an extent does not fit usize", what(), t.shape)))?;
        if let Some(why) = cotangent::shape::shape_problem(&shape, dtype) {
            return Err(bad(format!("{} has shape {shape:?} of {dtype}, which cannot exist: {why}", what())));
        }
        // shape_problem bounds the byte count by isize::MAX: this product does not overflow
        let size = shape.iter().product::<usize>() * dtype.size_of();
        let [start, end] = t.data_offsets;
        if start > end || end > data.len() as u64 {
            return Err(bad(format!(
                "{} has data_offsets [{start}, {end}], not a range within the {} bytes of data",
                what(),
                data.len()
            )));
        }
        let (start, end) = (start as usize, end as usize);
        if end - start != size {
            return Err(bad(format!(
                "{} of shape {shape:?} and dtype {dtype} takes {size} bytes, but its data_offsets [{start}, {end}] hold {}",
                what(),
                end - start
            )));
        }
        tensors.push(TensorEntry { name, dtype, shape, start, end });
    }
    // duplicate names, then the tiling of the data
    let mut order: Vec<usize> = (0..tensors.len()).collect();
    order.sort_unstable_by(|&a, &b| tensors[a].name.cmp(&tensors[b].name));
    if let Some(w) = order.windows(2).find(|w| tensors[w[0]].name == tensors[w[1]].name) {
        return Err(bad(format!("the header names tensor `{}` twice", tensors[w[0]].name)));
    }
    order.sort_unstable_by_key(|&i| (tensors[i].start, tensors[i].end));
    let mut cursor = 0;
    let mut previous: Option<&str> = None;
    for &i in &order {
        let t = &tensors[i];
        if t.start < cursor {
            let other = previous.unwrap_or_default();
            return Err(bad(format!("tensor `{}` overlaps tensor `{other}` (its data starts at {})", t.name, t.start)));
        }
        if t.start > cursor {
            return Err(bad(format!(
                "bytes {cursor}..{} of the data belong to no tensor (before tensor `{}`)",
                t.start, t.name
            )));
        }
        cursor = t.end;
        previous = Some(&t.name);
    }
    if cursor != data.len() {
        return Err(bad(format!("bytes {cursor}..{} at the end of the data belong to no tensor", data.len())));
    }
    Ok(CheckedHeader { metadata: raw.metadata.unwrap_or_default(), tensors, data })
}

/// The dtype named as in a safetensors header, if cotangent supports it.
fn dtype_from_name(name: &str) -> Option<DType> {
    Some(match name {
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

/// A safetensors header as written: `__metadata__` and the tensors in file order, duplicates
/// kept (so they can be reported).
struct RawHeader {
    metadata: Option<HashMap<String, String>>,
    tensors: Vec<(String, RawTensor)>,
}

#[derive(serde::Deserialize)]
struct RawTensor {
    dtype: String,
    shape: RawShape,
    data_offsets: [u64; 2],
}

/// A shape of at most [`MAX_RANK`] extents.
struct RawShape(Vec<u64>);

impl std::ops::Deref for RawShape {
    type Target = [u64];
    fn deref(&self) -> &[u64] {
        &self.0
    }
}

impl std::fmt::Debug for RawShape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl<'de> serde::Deserialize<'de> for RawShape {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = RawShape;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "a shape: a list of at most {MAX_RANK} non-negative integers")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<RawShape, A::Error> {
                let mut dims = Vec::new();
                while let Some(d) = seq.next_element::<u64>()? {
                    if dims.len() == MAX_RANK {
                        return Err(serde::de::Error::custom(format!("a shape of more than {MAX_RANK} dimensions")));
                    }
                    dims.push(d);
                }
                Ok(RawShape(dims))
            }
        }
        d.deserialize_seq(V)
    }
}

impl<'de> serde::Deserialize<'de> for RawHeader {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = RawHeader;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a safetensors header: a JSON object of tensors and `__metadata__`")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> std::result::Result<RawHeader, A::Error> {
                let mut header = RawHeader { metadata: None, tensors: Vec::new() };
                while let Some(name) = map.next_key::<String>()? {
                    if name == "__metadata__" {
                        if header.metadata.is_some() {
                            return Err(serde::de::Error::custom("`__metadata__` appears twice"));
                        }
                        header.metadata = Some(map.next_value()?);
                    } else {
                        let tensor = map
                            .next_value::<RawTensor>()
                            .map_err(|e| serde::de::Error::custom(format_args!("tensor `{name}`: {e}")))?;
                        header.tensors.push((name, tensor));
                    }
                }
                Ok(header)
            }
        }
        d.deserialize_map(V)
    }
}

fn read_file(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| Error::Io(format!("reading {}: {e}", path.display())))
}

fn name_file(path: &Path) -> impl Fn(Error) -> Error + '_ {
    move |e| match e {
        Error::Io(m) => Error::Io(format!("{}: {m}", path.display())),
        Error::Shape(m) => Error::Shape(format!("{}: {m}", path.display())),
        Error::Other(m) => Error::Other(format!("{}: {m}", path.display())),
        e => e,
    }
}

/// Read a safetensors file into a tree.
pub fn load(path: impl AsRef<Path>) -> Result<Tree> {
    let p = path.as_ref();
    from_safetensors_bytes(&read_file(p)?).map_err(name_file(p))
}

/// Load a checkpoint into `model`: every parameter (named as in
/// [`parameters`](Module::parameters)) must be in the file with the same shape; it is converted
/// to the parameter's dtype (a `bf16` or `f16` file loads into an `f32` model). Every missing
/// tensor, shape mismatch and extra tensor is named in one `Err`, and the model is then left
/// unchanged.
///
/// ```
/// use cotangent::{self as ct, DType};
/// use cotangent_nn::{io, Linear, Module};
/// let path = std::env::temp_dir().join(format!("doc_load_into_{}.safetensors", std::process::id()));
/// let saved = Linear::new(&ct::random::key(0), 3, 2, true, DType::F32);
/// io::save(&path, &saved.parameters(), Some(DType::BF16)).unwrap();
/// let mut model = Linear::new(&ct::random::key(1), 3, 2, true, DType::F32);
/// io::load_into(&mut model, &path).unwrap();
/// assert_eq!(model.weight.dtype(), DType::F32);
/// let mut wrong = Linear::new(&ct::random::key(1), 4, 2, false, DType::F32);
/// let err = io::load_into(&mut wrong, &path).unwrap_err().to_string();
/// assert!(err.contains("`weight` has shape [2, 3]") && err.contains("`bias` is not a parameter"), "{err}");
/// # std::fs::remove_file(&path).ok();
/// ```
pub fn load_into<M: Module>(model: &mut M, path: impl AsRef<Path>) -> Result<()> {
    load_into_with_prefix(model, path, "")
}

/// Load the parameters of `model` from the tensors named `prefix` + parameter name, e.g. one
/// decoder layer of a Hugging Face checkpoint with `prefix = "model.layers.3."`. Tensors that
/// do not start with `prefix` are ignored (not read); among those that do, the rules of
/// [`load_into`] apply: all missing, extra and mis-shaped tensors are named in one `Err`.
pub fn load_into_with_prefix<M: Module>(model: &mut M, path: impl AsRef<Path>, prefix: &str) -> Result<()> {
    let p = path.as_ref();
    let tensors = named_tensors_from_bytes(&read_file(p)?, |name| name.starts_with(prefix)).map_err(name_file(p))?;
    assign_named_tensors(model, tensors, prefix).map_err(name_file(p))
}

/// Set the parameters of `model` from `(name, array)` pairs, where a parameter `w` is named
/// `prefix` + `w`; names without the prefix are ignored. Arrays are converted to each
/// parameter's dtype. Every missing, extra (under the prefix) or mis-shaped tensor is named in
/// one `Err`; the model is changed only when there is none.
///
/// ```
/// use cotangent::{self as ct, Array, DType};
/// use cotangent_nn::{io, Linear, Module};
/// let mut lin = Linear::new(&ct::random::key(0), 2, 1, false, DType::F32);
/// let tensors = vec![
///     ("layer.weight".to_string(), Array::from_slice(&[1.0f64, 2.0], &[1, 2])),
///     ("other.weight".to_string(), Array::scalar(0.0f32)), // no prefix: ignored
/// ];
/// io::assign_named_tensors(&mut lin, tensors, "layer.").unwrap();
/// assert_eq!(lin.weight.to_vec::<f32>().unwrap(), vec![1.0, 2.0]);
/// ```
pub fn assign_named_tensors<M: Module>(
    model: &mut M,
    tensors: impl IntoIterator<Item = (String, Array)>,
    prefix: &str,
) -> Result<()> {
    let found: HashMap<String, Array> =
        tensors.into_iter().filter_map(|(n, a)| n.strip_prefix(prefix).map(|rest| (rest.to_string(), a))).collect();
    let mut check = LoadCheck { prefix, found, path: Vec::new(), replacements: Vec::new(), problems: Vec::new() };
    model.visit(&mut check);
    let mut extra: Vec<&String> = check.found.keys().collect();
    extra.sort();
    let mut problems = check.problems;
    let only_shapes = problems.iter().all(|(shape, _)| *shape) && extra.is_empty();
    let mut messages: Vec<String> = problems.drain(..).map(|(_, m)| m).collect();
    messages.extend(extra.iter().map(|n| {
        let a = &check.found[*n];
        format!("tensor `{prefix}{n}` is not a parameter of the model (the file has {:?} {})", a.shape(), a.dtype())
    }));
    if !messages.is_empty() {
        return Err(problems_error("loading parameters", messages, only_shapes));
    }
    let arrays: Vec<Array> = check.replacements.iter().flatten().cloned().collect();
    cotangent::eval(&arrays)?;
    model.visit(&mut Assign { replacements: check.replacements.into_iter() });
    Ok(())
}

/// First pass of [`assign_named_tensors`]: matches each parameter with its tensor.
struct LoadCheck<'a> {
    prefix: &'a str,
    found: HashMap<String, Array>,
    path: Vec<String>,
    replacements: Vec<Option<Array>>,
    /// (is a shape mismatch, message)
    problems: Vec<(bool, String)>,
}

impl Visitor for LoadCheck<'_> {
    fn visit_param(&mut self, name: &str, value: &mut Array, _frozen: bool) {
        let mut parts = self.path.clone();
        parts.push(name.to_string());
        let full = parts.join(".");
        let prefix = self.prefix;
        let replacement = match self.found.remove(&full) {
            None => {
                self.problems.push((
                    false,
                    format!(
                        "missing tensor `{prefix}{full}` (the model's parameter is {:?} {})",
                        value.shape(),
                        value.dtype()
                    ),
                ));
                None
            }
            Some(a) if a.shape() != value.shape() => {
                self.problems.push((
                    true,
                    format!(
                        "tensor `{prefix}{full}` has shape {:?} in the file but the model's parameter is {:?}",
                        a.shape(),
                        value.shape()
                    ),
                ));
                None
            }
            Some(a) => Some(a.astype(value.dtype())),
        };
        self.replacements.push(replacement);
    }
    fn enter(&mut self, name: &str) {
        self.path.push(name.to_string());
    }
    fn leave(&mut self) {
        self.path.pop();
    }
}

/// The string metadata of a safetensors file (`__metadata__`; empty if it has none), e.g. the
/// configuration a reference file was generated with.
///
/// ```
/// use cotangent::Array;
/// use cotangent_nn::{io, Tree};
/// let path = std::env::temp_dir().join(format!("doc_metadata_{}.safetensors", std::process::id()));
/// io::save(&path, &Tree::dict([("x", Tree::leaf(Array::scalar(1.0f32)))]), None).unwrap();
/// assert!(io::load_metadata(&path).unwrap().contains_key("cotangent.order"));
/// # std::fs::remove_file(&path).ok();
/// ```
pub fn load_metadata(path: impl AsRef<Path>) -> Result<HashMap<String, String>> {
    let p = path.as_ref();
    let bytes = read_file(p)?;
    Ok(checked_header(&bytes).map_err(name_file(p))?.metadata)
}
