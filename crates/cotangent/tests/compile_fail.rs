//! The `Send + Sync` contract is checked at compile time: custom functions, their rules and
//! transformed functions reject closures that capture an `Rc`. Each file in tests/ui must fail
//! to compile with the error recorded next to it (regenerate with `TRYBUILD=overwrite`).
#[test]
fn closures_that_are_not_send_sync_are_rejected() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}
