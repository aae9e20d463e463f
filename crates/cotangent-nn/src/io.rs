//! Saving and loading parameter trees as [safetensors](https://github.com/huggingface/safetensors)
//! files (`f32`, `f64`, `f16`, `bf16`, and the integer dtypes).
//!
//! Tensor names are the dotted leaf names of the tree. The tree's leaf order is stored in the
//! file's metadata (`cotangent.order`) so [`load`] rebuilds the same order.
use crate::module::{problems_error, Assign};
use crate::{Module, Tree, Visitor};
use cotangent::{Array, DType, Error, Result};
use safetensors::{Dtype, SafeTensors};
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

fn ct_dtype(d: Dtype, name: &str) -> Result<DType> {
    Ok(match d {
        Dtype::BOOL => DType::Bool,
        Dtype::U8 => DType::U8,
        Dtype::U32 => DType::U32,
        Dtype::I32 => DType::I32,
        Dtype::I64 => DType::I64,
        Dtype::F16 => DType::F16,
        Dtype::BF16 => DType::BF16,
        Dtype::F32 => DType::F32,
        Dtype::F64 => DType::F64,
        other => return Err(Error::Io(format!("safetensors: tensor `{name}` has unsupported dtype {other:?}"))),
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
    let flat = tree.flatten();
    let mut owned = Vec::with_capacity(flat.len());
    for (name, a) in &flat {
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
    std::fs::write(path.as_ref(), bytes).map_err(|e| Error::Io(format!("writing {}: {e}", path.as_ref().display())))
}

/// Parse safetensors bytes into a tree. A truncated or malformed buffer is an `Err` that says
/// what is wrong.
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
    let st = SafeTensors::deserialize(bytes).map_err(|e| Error::Io(format!("malformed safetensors data: {e}")))?;
    let (_, meta) =
        SafeTensors::read_metadata(bytes).map_err(|e| Error::Io(format!("malformed safetensors data: {e}")))?;
    let mut names: Vec<String> = st.names().into_iter().map(String::from).collect();
    names.sort();
    if let Some(order) = meta.metadata().as_ref().and_then(|m| m.get(ORDER_KEY)) {
        let stored: Vec<String> = order.split('\n').filter(|s| !s.is_empty()).map(String::from).collect();
        let mut a = stored.clone();
        a.sort();
        if a == names {
            names = stored;
        }
    }
    let mut items = Vec::with_capacity(names.len());
    for name in names.into_iter().filter(|n| keep(n)) {
        let view = st.tensor(&name).map_err(|e| Error::Io(format!("safetensors: tensor `{name}`: {e}")))?;
        let dtype = ct_dtype(view.dtype(), &name)?;
        items.push((name, from_bytes(view.data(), view.shape(), dtype)));
    }
    Ok(items)
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
    let (_, meta) = SafeTensors::read_metadata(&bytes)
        .map_err(|e| Error::Io(format!("{}: malformed safetensors data: {e}", p.display())))?;
    Ok(meta.metadata().clone().unwrap_or_default())
}
