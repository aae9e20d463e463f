//! Hostile safetensors files (issue 21, item 5): truncated buffers, offsets out of range or
//! overlapping, headers whose dtype or shape disagree with the byte count, declared sizes that
//! overflow, non-UTF-8 and duplicate names. Each is an `Err` with a message, never a panic, and
//! loading never allocates more than the file's size (plus a small constant for parsing state):
//! a counting allocator records the largest allocation made on the loading thread.
//!
//! `fuzz_mutated_files` mutates valid files (byte flips, truncations, insertions, header edits
//! that keep the header length consistent) with a fixed seed; `corpus_files_are_rejected` keeps
//! the inputs that once panicked or were wrongly accepted, in `tests/corpus/`.
use cotangent::{self as ct, Array, DType, Error};
use cotangent_nn::io::{from_safetensors_bytes, load, load_into_with_prefix, save, to_safetensors_bytes};
use cotangent_nn::{Activation, Linear, Mlp, Module, Tree};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestRunner};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

// ----- the largest allocation made while loading -----------------------------------------------

struct Counting;

thread_local! {
    static TRACKING: Cell<bool> = const { Cell::new(false) };
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    let _ = TRACKING.try_with(|t| {
        if t.get() {
            LARGEST.with(|m| m.set(m.get().max(size)));
        }
    });
}

// SAFETY: every call is forwarded unchanged to the system allocator; `note` only reads and
// writes thread-local cells without allocating.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        System.alloc(layout)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        System.alloc_zeroed(layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        System.realloc(ptr, layout, new_size)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// What parsing state may allocate beyond the file's size: error messages, a few small maps.
const SLACK: usize = 16 << 10;

/// Parses `bytes`, returning the result and the largest allocation made meanwhile on this thread.
fn parse(bytes: &[u8]) -> (ct::Result<Tree>, usize) {
    LARGEST.with(|m| m.set(0));
    TRACKING.with(|t| t.set(true));
    let result = from_safetensors_bytes(bytes);
    TRACKING.with(|t| t.set(false));
    (result, LARGEST.with(Cell::get))
}

/// `bytes` are rejected with an i/o error containing `fragment`, allocating no more than their
/// size plus [`SLACK`].
#[track_caller]
fn rejected(bytes: &[u8], fragment: &str) {
    let (result, largest) = parse(bytes);
    let e = match result {
        Ok(t) => panic!("accepted, with tensors {:?}; expected an error containing {fragment:?}", t.names()),
        Err(e) => e,
    };
    assert!(matches!(e, Error::Io(_)), "not an i/o error: {e:?}");
    let m = e.to_string();
    assert!(m.contains(fragment), "{fragment:?} not in: {m}");
    assert!(largest <= bytes.len() + SLACK, "allocated {largest} bytes for a {}-byte file ({m})", bytes.len());
}

/// A safetensors buffer: the header length `n`, then `header`, then `data` zero bytes.
fn with_length(n: u64, header: &str, data: usize) -> Vec<u8> {
    let mut f = n.to_le_bytes().to_vec();
    f.extend_from_slice(header.as_bytes());
    f.resize(f.len() + data, 0);
    f
}

/// A well-formed buffer apart from what `header` says: the header length is right.
fn file(header: &str, data: usize) -> Vec<u8> {
    with_length(header.len() as u64, header, data)
}

fn sample() -> Tree {
    Tree::dict([
        ("w", Tree::leaf(Array::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]))),
        ("b", Tree::leaf(Array::from_slice(&[7i64, 8], &[2]))),
        ("h", Tree::leaf(Array::from_slice(&[half::bf16::from_f32(0.5)], &[1, 1]))),
    ])
}

// ----- one test per kind of damage ---------------------------------------------------------------

#[test]
fn a_file_cut_anywhere_is_an_error() {
    let bytes = to_safetensors_bytes(&sample(), None).unwrap();
    assert!(parse(&bytes).0.is_ok());
    for cut in 0..bytes.len() {
        let (result, largest) = parse(&bytes[..cut]);
        let e = result.err().unwrap_or_else(|| panic!("the first {cut} of {} bytes were accepted", bytes.len()));
        assert!(e.to_string().contains("malformed safetensors data"), "cut {cut}: {e}");
        assert!(largest <= cut + SLACK, "cut {cut}: allocated {largest}");
    }
    rejected(&[], "0 bytes, fewer than the 8 of the header length");
    rejected(&bytes[..8], "the header length");
}

#[test]
fn header_lengths_beyond_the_file_are_errors() {
    let header = r#"{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}"#;
    assert!(parse(&file(header, 2)).0.is_ok());
    for n in [u64::MAX, u64::MAX - 7, 1 << 63, 1 << 32, header.len() as u64 + 3] {
        rejected(&with_length(n, header, 2), &format!("the header length {n} exceeds the"));
    }
    // shorter than the header: the JSON is cut
    rejected(&with_length(header.len() as u64 - 1, header, 2), "header: EOF while parsing");
}

#[test]
fn offsets_out_of_range_reversed_overlapping_or_leaving_gaps_are_errors() {
    let one =
        |offsets: &str, data| file(&format!(r#"{{"a":{{"dtype":"F32","shape":[2],"data_offsets":{offsets}}}}}"#), data);
    rejected(&one("[0,4611686018427387904]", 8), "tensor `a` has data_offsets [0, 4611686018427387904], not a range");
    rejected(&one("[8,0]", 8), "data_offsets [8, 0], not a range within the 8 bytes");
    rejected(&one("[4,12]", 8), "not a range within the 8 bytes");
    rejected(&one("[18446744073709551615,18446744073709551615]", 8), "not a range");
    rejected(&one("[0,8,16]", 8), "tensor `a`: trailing characters");
    rejected(&one("[-1,8]", 8), "invalid value: integer `-1`");
    rejected(&one("[0,1e3]", 8), "invalid type: floating point");
    // a gap before a tensor, trailing bytes, and two tensors sharing bytes
    rejected(&one("[0,8]", 12), "bytes 8..12 at the end of the data belong to no tensor");
    let two = |a: &str, b: &str, data| {
        file(
            &format!(
                r#"{{"a":{{"dtype":"F32","shape":[2],"data_offsets":{a}}},"b":{{"dtype":"F32","shape":[2],"data_offsets":{b}}}}}"#
            ),
            data,
        )
    };
    assert!(parse(&two("[0,8]", "[8,16]", 16)).0.is_ok());
    rejected(&two("[0,8]", "[4,12]", 12), "tensor `b` overlaps tensor `a` (its data starts at 4)");
    rejected(&two("[0,8]", "[0,8]", 8), "overlaps");
    rejected(&two("[4,12]", "[12,20]", 20), "bytes 0..4 of the data belong to no tensor (before tensor `a`)");
}

#[test]
fn a_dtype_or_shape_that_disagrees_with_the_byte_count_is_an_error() {
    let t = |dtype: &str, shape: &str, end: usize| {
        file(&format!(r#"{{"x":{{"dtype":"{dtype}","shape":{shape},"data_offsets":[0,{end}]}}}}"#), end)
    };
    assert!(parse(&t("F32", "[2,2]", 16)).0.is_ok());
    rejected(
        &t("F32", "[2,2]", 8),
        "tensor `x` of shape [2, 2] and dtype float32 takes 16 bytes, but its data_offsets [0, 8] hold 8",
    );
    rejected(&t("F64", "[2,2]", 16), "takes 32 bytes");
    rejected(&t("BF16", "[3]", 4), "takes 6 bytes");
    rejected(&t("F32", "[]", 8), "takes 4 bytes");
    rejected(&t("U8", "[0]", 1), "takes 0 bytes");
    // dtypes cotangent does not have, and names that are no dtype
    for dtype in ["F8_E4M3", "I8", "U64", "C64", "f32", ""] {
        rejected(&t(dtype, "[1]", 1), &format!("tensor `x` has unsupported dtype {dtype:?}"));
    }
    rejected(&file(r#"{"x":{"shape":[1],"data_offsets":[0,1]}}"#, 1), "missing field `dtype`");
    rejected(&file(r#"{"x":{"dtype":"U8","data_offsets":[0,1]}}"#, 1), "missing field `shape`");
    rejected(&file(r#"{"x":{"dtype":"U8","shape":[1]}}"#, 1), "missing field `data_offsets`");
    rejected(&file(r#"{"x":{"dtype":"U8","shape":[1.5],"data_offsets":[0,1]}}"#, 1), "invalid type: floating point");
}

#[test]
fn declared_sizes_that_overflow_are_errors_without_allocating_them() {
    let t = |dtype: &str, shape: &str, end: &str| {
        file(&format!(r#"{{"x":{{"dtype":"{dtype}","shape":{shape},"data_offsets":[0,{end}]}}}}"#), 16)
    };
    // element counts that overflow usize, and wrap to small numbers (2^64 + 4 → 4, 2^64 → 0)
    rejected(&t("F32", "[4294967296,4294967296,4294967296]", "16"), "its element count overflows usize");
    rejected(&t("U8", "[18446744073709551615,2]", "16"), "its element count overflows usize");
    rejected(&t("F32", "[4294967296,4294967296]", "16"), "which cannot exist");
    rejected(&t("U8", "[4294967297,4294967295]", "16"), "which cannot exist");
    // byte counts beyond isize::MAX, and empty arrays whose strides would overflow
    rejected(&t("F64", "[1152921504606846976]", "16"), "are 9223372036854775808 bytes, more than isize::MAX");
    rejected(&t("F32", "[0,4611686018427387904,4611686018427387904]", "0"), "zero extents counted as 1");
    // u64 values that do not fit, and more dimensions than a shape may have
    rejected(&t("U8", "[18446744073709551616]", "16"), "expected u64");
    let rank65 = format!("[{}]", vec!["1"; 65].join(","));
    rejected(&t("U8", &rank65, "1"), "a shape of more than 64 dimensions");
    let rank64 = format!("[{}]", vec!["1"; 64].join(","));
    assert_eq!(
        parse(&file(&format!(r#"{{"x":{{"dtype":"U8","shape":{rank64},"data_offsets":[0,1]}}}}"#), 1))
            .0
            .unwrap()
            .get("x")
            .unwrap()
            .ndim(),
        64
    );
    // tensors whose offsets add up to nearly 2^64 (each 2^61 - 1 bytes of u8)
    let big = (1u64 << 61) - 1;
    let header = format!(
        "{{{}}}",
        (0..8u64)
            .map(|i| format!(
                r#""t{i}":{{"dtype":"U8","shape":[{big}],"data_offsets":[{},{}]}}"#,
                i * big,
                (i + 1) * big
            ))
            .collect::<Vec<_>>()
            .join(",")
    );
    rejected(
        &file(&header, 0),
        "tensor `t0` has data_offsets [0, 2305843009213693951], not a range within the 0 bytes",
    );
}

#[test]
fn names_that_are_not_utf8_or_appear_twice_are_errors() {
    let mut bytes = file(r#"{"a\u00ff":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}"#, 1);
    assert_eq!(parse(&bytes).0.unwrap().names(), ["a\u{ff}"]);
    // raw invalid UTF-8 in a name
    let at = bytes.windows(6).position(|w| w == b"\\u00ff").unwrap();
    bytes.splice(at..at + 6, [0xff, 0xfe, b' ', b' ', b' ', b' ']);
    rejected(&bytes, &format!("the header is not UTF-8 (byte {} of the header)", at - 8));
    // an escaped lone surrogate is no Unicode scalar value
    rejected(&file(r#"{"a\ud800":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}"#, 1), "hex escape");
    // the same name twice, at distinct or at the same bytes
    let twice = |second: &str| {
        file(
            &format!(
                r#"{{"a":{{"dtype":"U8","shape":[1],"data_offsets":[0,1]}},"a":{{"dtype":"U8","shape":[1],"data_offsets":{second}}}}}"#
            ),
            if second == "[0,1]" { 1 } else { 2 },
        )
    };
    rejected(&twice("[1,2]"), "the header names tensor `a` twice");
    rejected(&twice("[0,1]"), "the header names tensor `a` twice");
    let meta_twice = r#"{"__metadata__":{},"__metadata__":{},"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}"#;
    rejected(&file(meta_twice, 1), "`__metadata__` appears twice");
    rejected(&file(r#"{"__metadata__":{"k":1}}"#, 0), "invalid type: integer `1`, expected a string");
    // a well-formed file whose names cannot form a tree
    let e = parse(&file(r#"{"":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}"#, 1)).0.unwrap_err();
    assert!(e.to_string().contains("parameter tree: empty name"), "{e}");
}

#[test]
fn headers_that_are_not_a_json_object_are_errors() {
    for (header, fragment) in [
        ("", "header: EOF while parsing"),
        ("[]", "expected a safetensors header"),
        ("null", "expected a safetensors header"),
        (r#"{"a":1}"#, "tensor `a`: invalid type: integer `1`"),
        ("{} x", "trailing characters"),
        // deep nesting where unknown fields are skipped: no stack overflow
        (&format!(r#"{{"a":{{"extra":{}{}}}}}"#, "[".repeat(100_000), "]".repeat(100_000)), "missing field `dtype`"),
    ] {
        rejected(&file(header, 0), fragment);
    }
    // padding after the object, as writers may add for alignment, is fine
    assert!(parse(&file("{}        ", 0)).0.unwrap().names().is_empty());
}

#[test]
fn files_on_disk_name_themselves_in_the_error() {
    let dir = std::env::temp_dir().join(format!("ct_nn_hostile_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("overlap.safetensors");
    let header =
        r#"{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}}"#;
    std::fs::write(&path, file(header, 3)).unwrap();
    let m = load(&path).unwrap_err().to_string();
    assert!(m.contains("overlap.safetensors: malformed safetensors data: tensor `b` overlaps tensor `a`"), "{m}");
    let m = cotangent_nn::io::load_metadata(&path).unwrap_err().to_string();
    assert!(m.contains("overlap.safetensors") && m.contains("overlaps"), "{m}");
    let mut model = Linear::new(&ct::random::key(0), 2, 2, false, DType::F32);
    let m = cotangent_nn::io::load_into(&mut model, &path).unwrap_err().to_string();
    assert!(m.contains("overlaps"), "{m}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn checkpoints_under_a_prefix_name_each_missing_extra_and_mis_shaped_key() {
    let dir = std::env::temp_dir().join(format!("ct_nn_hostile_prefix_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("ckpt.safetensors");
    let src = Mlp::new(&ct::random::key(1), 3, 4, Activation::Relu, DType::F32);
    // fc1.weight transposed, fc2.bias missing, one extra tensor under the prefix and one outside
    let under = src
        .parameters()
        .filter(|n| n != "fc2.bias")
        .map(|n, a| if n == "fc1.weight" { a.t() } else { a.clone() })
        .with("fc3.weight", Tree::leaf(ct::zeros(&[2], DType::F32)));
    let file =
        Tree::dict([("model", Tree::dict([("mlp", under)])), ("other", Tree::leaf(ct::zeros(&[5], DType::F32)))]);
    save(&path, &file, None).unwrap();
    let mut model = Mlp::new(&ct::random::key(2), 3, 4, Activation::Relu, DType::F32);
    let before = model.fc2.bias.as_ref().unwrap().to_vec::<f32>().unwrap();
    let m = load_into_with_prefix(&mut model, &path, "model.mlp.").unwrap_err().to_string();
    for part in [
        "ckpt.safetensors: loading parameters: ",
        "tensor `model.mlp.fc1.weight` has shape [3, 4] in the file but the model's parameter is [4, 3]",
        "missing tensor `model.mlp.fc2.bias` (the model's parameter is [3] float32)",
        "tensor `model.mlp.fc3.weight` is not a parameter of the model (the file has [2] float32)",
    ] {
        assert!(m.contains(part), "{part:?} not in: {m}");
    }
    assert!(!m.contains("other"), "a tensor outside the prefix is ignored: {m}");
    assert_eq!(model.fc2.bias.as_ref().unwrap().to_vec::<f32>().unwrap(), before, "nothing changed");
    std::fs::remove_dir_all(&dir).ok();
}

// ----- the corpus of past findings -----------------------------------------------------------

/// Each file of `tests/corpus/` and a fragment of the error it must give. Add a file here when
/// the fuzzer (or anyone) finds an input that panics, over-allocates or is wrongly accepted.
const CORPUS: &[(&str, &str)] = &[
    // 8 tensors of 2^61 - 1 bytes: the end of the data, plus the header, overflowed u64 (a panic
    // in the safetensors crate in builds with overflow checks)
    ("offsets_sum_past_u64.safetensors", "tensor `t0` has data_offsets [0, 2305843009213693951], not a range"),
    // an empty tensor of shape [0, 2^62, 2^62]: accepted by the format, then a panic when the
    // array was made (its strides overflow)
    ("empty_with_huge_extents.safetensors", "zero extents counted as 1"),
    // two tensors `a` at the same bytes: one was silently dropped
    ("duplicate_name_same_bytes.safetensors", "the header names tensor `a` twice"),
];

#[test]
fn corpus_files_are_rejected() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus");
    let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".safetensors"))
        .collect();
    on_disk.sort();
    let mut listed: Vec<String> = CORPUS.iter().map(|(n, _)| n.to_string()).collect();
    listed.sort();
    assert_eq!(on_disk, listed, "every corpus file has an expected error in CORPUS");
    for (name, fragment) in CORPUS {
        let bytes = std::fs::read(dir.join(name)).unwrap();
        let (result, largest) = parse(&bytes);
        let m = result.err().unwrap_or_else(|| panic!("{name} was accepted")).to_string();
        assert!(m.contains(fragment), "{name}: {fragment:?} not in: {m}");
        assert!(largest <= bytes.len() + SLACK, "{name}: allocated {largest}");
    }
}

// ----- fuzzing ---------------------------------------------------------------------------------

/// Interesting values for a number in a header.
fn edge_number() -> impl Strategy<Value = u64> {
    prop_oneof![
        0u64..64,
        Just(u64::MAX),
        Just(u64::MAX - 7),
        Just(1 << 63),
        Just((1 << 61) - 1),
        Just(1 << 62),
        Just(1 << 32),
        Just(u32::MAX as u64 + 1),
        any::<u64>(),
    ]
}

#[derive(Clone, Debug)]
enum Mutation {
    /// `bytes[at % len] ^= xor`
    Flip { at: usize, xor: u8 },
    /// keep the first `keep % (len + 1)` bytes
    Truncate { keep: usize },
    /// insert `bytes` at `at % (len + 1)`
    Insert { at: usize, bytes: Vec<u8> },
    /// replace the header length
    SetLength(u64),
    /// replace the `which`-th number of the header (the header length follows)
    EditNumber { which: usize, value: u64 },
    /// replace the `which`-th string of the header (the header length follows)
    EditString { which: usize, value: String },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let strings = prop_oneof![
        Just("F32".to_string()),
        Just("BF16".to_string()),
        Just("I64".to_string()),
        Just("F8_E4M3".to_string()),
        Just(String::new()),
        Just("__metadata__".to_string()),
        Just("shape".to_string()),
        Just("data_offsets".to_string()),
        Just("w".to_string()),
        Just("\\ud800".to_string()),
        "[a-z.]{0,3}",
    ];
    prop_oneof![
        (any::<usize>(), 1u8..=255).prop_map(|(at, xor)| Mutation::Flip { at, xor }),
        any::<usize>().prop_map(|keep| Mutation::Truncate { keep }),
        (any::<usize>(), prop::collection::vec(any::<u8>(), 1..6))
            .prop_map(|(at, bytes)| Mutation::Insert { at, bytes }),
        edge_number().prop_map(Mutation::SetLength),
        (any::<usize>(), edge_number()).prop_map(|(which, value)| Mutation::EditNumber { which, value }),
        (any::<usize>(), strings).prop_map(|(which, value)| Mutation::EditString { which, value }),
    ]
}

/// The header text of a buffer whose length prefix fits it, and the data after it.
fn split(bytes: &[u8]) -> Option<(String, Vec<u8>)> {
    let n = usize::try_from(u64::from_le_bytes(bytes.get(..8)?.try_into().unwrap())).ok()?;
    let header = std::str::from_utf8(bytes.get(8..8usize.checked_add(n)?)?).ok()?;
    Some((header.to_string(), bytes[8 + n..].to_vec()))
}

/// Replaces the `which`-th (cyclically) match of `find` in the header with `f(match)`, updating
/// the header length; buffers without a readable header or match are left alone.
fn edit_header(bytes: &mut Vec<u8>, which: usize, find: fn(&str) -> Vec<(usize, usize)>, with: &str) {
    let Some((header, data)) = split(bytes) else { return };
    let spans = find(&header);
    if spans.is_empty() {
        return;
    }
    let (a, b) = spans[which % spans.len()];
    let header = format!("{}{with}{}", &header[..a], &header[b..]);
    *bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend_from_slice(&data);
}

/// Byte spans of the runs of ASCII digits.
fn numbers(s: &str) -> Vec<(usize, usize)> {
    spans(s, |b| b.is_ascii_digit())
}

/// Byte spans of the contents of double-quoted strings (without escapes, as the writer makes).
fn strings(s: &str) -> Vec<(usize, usize)> {
    let quotes: Vec<usize> = s.match_indices('"').map(|(i, _)| i).collect();
    quotes.chunks_exact(2).map(|q| (q[0] + 1, q[1])).collect()
}

fn spans(s: &str, inside: fn(u8) -> bool) -> Vec<(usize, usize)> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if inside(b[i]) {
            let start = i;
            while i < b.len() && inside(b[i]) {
                i += 1;
            }
            out.push((start, i));
        } else {
            i += 1;
        }
    }
    out
}

fn apply(bytes: &mut Vec<u8>, m: &Mutation) {
    match m {
        Mutation::Flip { at, xor } => {
            if !bytes.is_empty() {
                let i = at % bytes.len();
                bytes[i] ^= xor;
            }
        }
        Mutation::Truncate { keep } => bytes.truncate(keep % (bytes.len() + 1)),
        Mutation::Insert { at, bytes: new } => {
            let i = at % (bytes.len() + 1);
            bytes.splice(i..i, new.iter().copied());
        }
        Mutation::SetLength(n) => {
            if bytes.len() >= 8 {
                bytes[..8].copy_from_slice(&n.to_le_bytes());
            }
        }
        Mutation::EditNumber { which, value } => edit_header(bytes, *which, numbers, &value.to_string()),
        Mutation::EditString { which, value } => edit_header(bytes, *which, strings, value),
    }
}

/// A valid file of 1 to 4 tensors of random dtypes and small shapes.
fn valid_file() -> impl Strategy<Value = Vec<u8>> {
    let dtypes =
        [DType::Bool, DType::U8, DType::U32, DType::I32, DType::I64, DType::F16, DType::BF16, DType::F32, DType::F64];
    let tensor = (0..dtypes.len(), prop::collection::vec(0usize..4, 0..3));
    prop::collection::vec(tensor, 1..5).prop_map(move |specs| {
        let leaves = specs.iter().enumerate().map(|(i, (d, shape))| {
            let n: usize = shape.iter().product();
            let a = Array::from_vec((0..n).map(|k| k as f32 - 1.5).collect::<Vec<f32>>(), shape).astype(dtypes[*d]);
            let name = ["w", "b", "layers.0.w", "layers.1.w"][i];
            (name.to_string(), a)
        });
        to_safetensors_bytes(&Tree::unflatten(leaves).unwrap(), None).unwrap()
    })
}

/// Cases of [`fuzz_mutated_files`]: 100,000 (about a second in a debug build), or `HOSTILE_FUZZ_CASES`.
fn config_cases() -> u32 {
    std::env::var("HOSTILE_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(100_000)
}

#[test]
fn fuzz_mutated_files() {
    let config = Config {
        cases: config_cases(),
        rng_seed: RngSeed::Fixed(0x000c_07a4_6e47),
        failure_persistence: None,
        ..Config::default()
    };
    let strategy = (valid_file(), prop::collection::vec(mutation(), 1..4));
    let accepted = Cell::new(0usize);
    let mut runner = TestRunner::new(config);
    runner
        .run(&strategy, |(original, mutations)| {
            let mut bytes = original;
            for m in &mutations {
                apply(&mut bytes, m);
            }
            let (result, largest) = parse(&bytes);
            prop_assert!(largest <= bytes.len() + SLACK, "allocated {} for {} bytes", largest, bytes.len());
            match result {
                Ok(tree) => {
                    accepted.set(accepted.get() + 1);
                    let stored: usize = tree
                        .flatten()
                        .iter()
                        .map(|(_, a)| a.shape().iter().product::<usize>() * a.dtype().size_of())
                        .sum();
                    prop_assert!(stored <= bytes.len(), "{} bytes of tensors from a {}-byte file", stored, bytes.len());
                }
                Err(e) => prop_assert!(!e.to_string().is_empty()),
            }
            Ok(())
        })
        .unwrap();
    eprintln!("{} of {} mutated files were accepted", accepted.get(), config_cases());
    // most mutations break the file, but not all: the fuzzer also reaches the successful path
    assert!(accepted.get() > 0, "every mutated file was rejected");
}
