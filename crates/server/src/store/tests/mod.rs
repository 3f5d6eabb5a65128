//! The store's tests beside it: `corrupt` damages a closed sqlite file behind the hub's back
//! and checks the load refuses it clearly (the sqlite file's own tests are `sqlite::tests`).

mod corrupt;
