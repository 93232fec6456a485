//! `schema.graphql` is the checked-in contract; it must equal the SDL the
//! code exports.

#[test]
fn checked_in_schema_matches_the_code() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/schema.graphql");
    let checked_in = std::fs::read_to_string(path).unwrap_or_default();
    let exported = brainstem_api::schema::sdl();
    assert!(
        checked_in == exported,
        "schema.graphql differs from the schema in code; regenerate it with\n\n    \
         cargo run -q -- schema > schema.graphql\n\nand review the diff"
    );
}
