//! Schemas: Arrow types <-> Lance's flattened field list.
//!
//! Lance stores a schema as fields in pre-order (a parent, then its
//! children), each with an id, its parent's id (-1 at the top) and a
//! *logical type* string such as `int64`, `string` or
//! `fixed_size_list:float:128`. In a 2.0 file every field, containers
//! included, owns exactly one column, in that same pre-order; a
//! fixed-size list carries its element type in the logical type and has no
//! child field.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_schema::{DataType, Field, Fields, Schema, TimeUnit};

use crate::error::{Error, Result};
use crate::pb::file as pb;

/// One field of a Lance schema, with its children.
#[derive(Debug, Clone, PartialEq)]
pub struct LanceField {
    /// Field id, unique in the schema (and, in a dataset, across versions).
    pub id: i32,
    pub name: String,
    pub logical_type: String,
    pub nullable: bool,
    pub metadata: HashMap<String, String>,
    pub children: Vec<LanceField>,
}

/// Field metadata marking a struct packed (`packed` or
/// `lance-encoding:packed` set to true).
pub(crate) fn marked_packed(metadata: &HashMap<String, String>) -> bool {
    ["packed", "lance-encoding:packed"].iter().any(|k| {
        metadata
            .get(*k)
            .is_some_and(|v| v.eq_ignore_ascii_case("true"))
    })
}

/// A Lance schema: top-level fields plus schema metadata.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LanceSchema {
    pub fields: Vec<LanceField>,
    pub metadata: HashMap<String, String>,
}

fn unit_str(u: &TimeUnit) -> &'static str {
    match u {
        TimeUnit::Second => "s",
        TimeUnit::Millisecond => "ms",
        TimeUnit::Microsecond => "us",
        TimeUnit::Nanosecond => "ns",
    }
}

fn parse_unit(s: &str) -> Option<TimeUnit> {
    Some(match s {
        "s" => TimeUnit::Second,
        "ms" => TimeUnit::Millisecond,
        "us" => TimeUnit::Microsecond,
        "ns" => TimeUnit::Nanosecond,
        _ => return None,
    })
}

/// The logical type string Lance uses for an Arrow type, or an error naming
/// the type if the 2.0 format cannot store it.
pub fn logical_type(dt: &DataType) -> Result<String> {
    use DataType::*;
    Ok(match dt {
        Boolean => "bool".into(),
        Int8 => "int8".into(),
        UInt8 => "uint8".into(),
        Int16 => "int16".into(),
        UInt16 => "uint16".into(),
        Int32 => "int32".into(),
        UInt32 => "uint32".into(),
        Int64 => "int64".into(),
        UInt64 => "uint64".into(),
        Float16 => "halffloat".into(),
        Float32 => "float".into(),
        Float64 => "double".into(),
        Decimal128(p, s) => format!("decimal:128:{p}:{s}"),
        Decimal256(p, s) => format!("decimal:256:{p}:{s}"),
        Utf8 => "string".into(),
        LargeUtf8 => "large_string".into(),
        Binary => "binary".into(),
        LargeBinary => "large_binary".into(),
        Date32 => "date32:day".into(),
        Date64 => "date64:ms".into(),
        Time32(u) => format!("time32:{}", unit_str(u)),
        Time64(u) => format!("time64:{}", unit_str(u)),
        Duration(u) => format!("duration:{}", unit_str(u)),
        Timestamp(u, tz) => format!("timestamp:{}:{}", unit_str(u), tz.as_deref().unwrap_or("-")),
        FixedSizeBinary(w) => format!("fixed_size_binary:{w}"),
        FixedSizeList(item, n) => {
            if !is_fixed_width(item.data_type()) {
                return Err(Error::invalid(format!(
                    "fixed_size_list of {} is not supported (items must be fixed-width)",
                    item.data_type()
                )));
            }
            format!("fixed_size_list:{}:{n}", logical_type(item.data_type())?)
        }
        Struct(_) => "struct".into(),
        List(f) if matches!(f.data_type(), Struct(_)) => "list.struct".into(),
        LargeList(f) if matches!(f.data_type(), Struct(_)) => "large_list.struct".into(),
        List(_) => "list".into(),
        LargeList(_) => "large_list".into(),
        other => {
            return Err(Error::invalid(format!(
                "data type {other} cannot be stored in a Lance 2.0 file"
            )));
        }
    })
}

/// Lance refuses top-level field names holding `.` (its path separator
/// for nested fields): a dataset with one would not open in pylance, so it is refused
/// before anything is written.
pub fn check_field_name(name: &str) -> Result<()> {
    if name.is_empty() || name.contains('.') {
        return Err(Error::invalid(format!(
            "column name {name:?} cannot be stored: Lance field names must be non-empty and \
             contain no '.' (rename it, e.g. with SELECT \"{name}\" AS ...)"
        )));
    }
    Ok(())
}

/// Fixed-width types: stored as one Flat buffer (plus validity).
pub fn is_fixed_width(dt: &DataType) -> bool {
    dt.is_primitive() || matches!(dt, DataType::Boolean | DataType::FixedSizeBinary(_))
}

/// Parses a leaf logical type (anything but list/struct, which need children).
pub fn parse_logical_type(s: &str) -> Option<DataType> {
    use DataType::*;
    let simple = match s {
        "bool" => Some(Boolean),
        "int8" => Some(Int8),
        "uint8" => Some(UInt8),
        "int16" => Some(Int16),
        "uint16" => Some(UInt16),
        "int32" => Some(Int32),
        "uint32" => Some(UInt32),
        "int64" => Some(Int64),
        "uint64" => Some(UInt64),
        "halffloat" => Some(Float16),
        "float" => Some(Float32),
        "double" => Some(Float64),
        "string" => Some(Utf8),
        "large_string" => Some(LargeUtf8),
        "binary" => Some(Binary),
        "large_binary" => Some(LargeBinary),
        "date32:day" => Some(Date32),
        "date64:ms" => Some(Date64),
        "null" => Some(Null),
        _ => None,
    };
    if simple.is_some() {
        return simple;
    }
    let parts: Vec<&str> = s.split(':').collect();
    match parts[0] {
        "time32" if parts.len() == 2 => Some(Time32(parse_unit(parts[1])?)),
        "time64" if parts.len() == 2 => Some(Time64(parse_unit(parts[1])?)),
        "duration" if parts.len() == 2 => Some(Duration(parse_unit(parts[1])?)),
        "timestamp" if parts.len() >= 3 => {
            // A time zone such as "+05:00" contains ':' itself.
            let tz = parts[2..].join(":");
            let tz = (tz != "-").then(|| Arc::<str>::from(tz));
            Some(Timestamp(parse_unit(parts[1])?, tz))
        }
        "fixed_size_binary" if parts.len() == 2 => Some(FixedSizeBinary(parts[1].parse().ok()?)),
        "decimal" if parts.len() == 4 => {
            let p = parts[2].parse().ok()?;
            let sc = parts[3].parse().ok()?;
            match parts[1] {
                "128" => Some(Decimal128(p, sc)),
                "256" => Some(Decimal256(p, sc)),
                _ => None,
            }
        }
        // dict:<value type>:<key type>:<ordered>; the value type may hold ':'.
        "dict" if parts.len() >= 4 => {
            let key = parse_logical_type(parts[parts.len() - 2])?;
            let value = parse_logical_type(&parts[1..parts.len() - 2].join(":"))?;
            (key.is_dictionary_key_type() && !value.is_nested())
                .then(|| Dictionary(Box::new(key), Box::new(value)))
        }
        "fixed_size_list" if parts.len() >= 3 => {
            let n: i32 = parts[parts.len() - 1].parse().ok()?;
            let inner = parse_logical_type(&parts[1..parts.len() - 1].join(":"))?;
            Some(FixedSizeList(Arc::new(Field::new("item", inner, true)), n))
        }
        _ => None,
    }
}

impl LanceField {
    /// A struct stored packed (field metadata `packed` or
    /// `lance-encoding:packed` set to true): in 2.1+ files one column of
    /// packed rows, listed in a data file under the struct's own id.
    pub fn is_packed_struct(&self) -> bool {
        self.logical_type == "struct" && marked_packed(&self.metadata)
    }

    /// Builds a field (and its children) from Arrow, taking ids from `next_id`.
    pub fn from_arrow(field: &Field, next_id: &mut i32) -> Result<Self> {
        let logical_type = logical_type(field.data_type()).map_err(|e| {
            let hint = if field.data_type() == &DataType::Null {
                " (its values are all NULL or it has none, so no type could be inferred: \
                 cast it to a type, e.g. CAST(NULL AS VARCHAR))"
            } else {
                ""
            };
            Error::invalid(format!("column '{}': {e}{hint}", field.name()))
        })?;
        let id = *next_id;
        *next_id += 1;
        let children = match field.data_type() {
            DataType::Struct(fields) => fields
                .iter()
                .map(|f| LanceField::from_arrow(f, next_id))
                .collect::<Result<Vec<_>>>()?,
            DataType::List(f) | DataType::LargeList(f) => vec![LanceField::from_arrow(f, next_id)?],
            _ => vec![],
        };
        Ok(LanceField {
            id,
            name: field.name().clone(),
            logical_type,
            nullable: field.is_nullable(),
            metadata: field.metadata().clone(),
            children,
        })
    }

    /// The Arrow data type this field reads as.
    pub fn data_type(&self) -> Result<DataType> {
        let bad = || {
            Error::unsupported(
                "<schema>",
                format!(
                    "field '{}' has unknown logical type '{}'",
                    self.name, self.logical_type
                ),
            )
        };
        match self.logical_type.as_str() {
            "struct" => Ok(DataType::Struct(Fields::from(
                self.children
                    .iter()
                    .map(|c| c.to_arrow())
                    .collect::<Result<Vec<_>>>()?,
            ))),
            "list" | "list.struct" | "large_list" | "large_list.struct" => {
                let [item] = self.children.as_slice() else {
                    return Err(Error::corrupt(
                        "<schema>",
                        format!("list field '{}' must have exactly one child", self.name),
                    ));
                };
                let item = Arc::new(item.to_arrow()?);
                Ok(if self.logical_type.starts_with("large") {
                    DataType::LargeList(item)
                } else {
                    DataType::List(item)
                })
            }
            lt => parse_logical_type(lt).ok_or_else(bad),
        }
    }

    /// This field as an Arrow field (children included).
    pub fn to_arrow(&self) -> Result<Field> {
        Ok(Field::new(&self.name, self.data_type()?, self.nullable)
            .with_metadata(self.metadata.clone()))
    }

    /// Number of fields (= columns in a 2.0 file) in this subtree.
    pub fn num_columns(&self) -> usize {
        1 + self.children.iter().map(|c| c.num_columns()).sum::<usize>()
    }

    fn flatten_into(&self, parent_id: i32, out: &mut Vec<pb::Field>) {
        let encoding = match self.logical_type.as_str() {
            "struct" => pb::Encoding::None,
            "string" | "large_string" | "binary" | "large_binary" => pb::Encoding::VarBinary,
            _ => pb::Encoding::Plain,
        };
        out.push(pb::Field {
            r#type: pb::field::Type::Parent as i32,
            name: self.name.clone(),
            id: self.id,
            parent_id,
            logical_type: self.logical_type.clone(),
            nullable: self.nullable,
            encoding: encoding as i32,
            metadata: self
                .metadata
                .iter()
                .map(|(k, v)| (k.clone(), v.clone().into_bytes()))
                .collect(),
            ..Default::default()
        });
        for c in &self.children {
            c.flatten_into(self.id, out);
        }
    }
}

impl LanceSchema {
    /// Assigns ids 0, 1, 2, ... in pre-order.
    pub fn from_arrow(schema: &Schema) -> Result<Self> {
        let mut next = 0;
        Self::from_arrow_with_ids(schema, &mut next)
    }

    /// Assigns ids from `next_id` on, in pre-order.
    pub fn from_arrow_with_ids(schema: &Schema, next_id: &mut i32) -> Result<Self> {
        Ok(LanceSchema {
            fields: schema
                .fields()
                .iter()
                .map(|f| {
                    check_field_name(f.name())?;
                    LanceField::from_arrow(f, next_id)
                })
                .collect::<Result<Vec<_>>>()?,
            metadata: schema.metadata().clone(),
        })
    }

    /// The Arrow schema.
    pub fn to_arrow(&self) -> Result<Schema> {
        Ok(Schema::new_with_metadata(
            self.fields
                .iter()
                .map(|f| f.to_arrow())
                .collect::<Result<Vec<_>>>()?,
            self.metadata.clone(),
        ))
    }

    /// Flattened, pre-order protobuf fields.
    pub fn to_pb_fields(&self) -> Vec<pb::Field> {
        let mut out = Vec::new();
        for f in &self.fields {
            f.flatten_into(-1, &mut out);
        }
        out
    }

    /// Protobuf schema (fields + metadata).
    pub fn to_pb(&self) -> pb::Schema {
        pb::Schema {
            fields: self.to_pb_fields(),
            metadata: self
                .metadata
                .iter()
                .map(|(k, v)| (k.clone(), v.clone().into_bytes()))
                .collect(),
        }
    }

    /// Rebuilds the tree from flattened fields; children follow their parent.
    pub fn from_pb(fields: &[pb::Field], metadata: &HashMap<String, Vec<u8>>) -> Result<Self> {
        fn build(
            fields: &[pb::Field],
            idx: usize,
            children_of: &HashMap<i32, Vec<usize>>,
            depth: usize,
        ) -> Result<LanceField> {
            if depth > 64 {
                return Err(Error::corrupt("<schema>", "schema nesting deeper than 64"));
            }
            let f = &fields[idx];
            let children = children_of
                .get(&f.id)
                .map(|v| {
                    v.iter()
                        .map(|&c| build(fields, c, children_of, depth + 1))
                        .collect::<Result<Vec<_>>>()
                })
                .transpose()?
                .unwrap_or_default();
            Ok(LanceField {
                id: f.id,
                name: f.name.clone(),
                logical_type: f.logical_type.clone(),
                nullable: f.nullable,
                metadata: f
                    .metadata
                    .iter()
                    .map(|(k, v)| (k.clone(), String::from_utf8_lossy(v).into_owned()))
                    .collect(),
                children,
            })
        }
        let mut children_of: HashMap<i32, Vec<usize>> = HashMap::new();
        let mut roots = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for (i, f) in fields.iter().enumerate() {
            if !seen.insert(f.id) {
                return Err(Error::corrupt(
                    "<schema>",
                    format!("duplicate field id {}", f.id),
                ));
            }
            if f.parent_id < 0 {
                roots.push(i);
            } else if !seen.contains(&f.parent_id) || f.parent_id == f.id {
                return Err(Error::corrupt(
                    "<schema>",
                    format!(
                        "field '{}' (id {}) names parent {} which does not precede it",
                        f.name, f.id, f.parent_id
                    ),
                ));
            } else {
                children_of.entry(f.parent_id).or_default().push(i);
            }
        }
        Ok(LanceSchema {
            fields: roots
                .into_iter()
                .map(|r| build(fields, r, &children_of, 0))
                .collect::<Result<Vec<_>>>()?,
            metadata: metadata
                .iter()
                .map(|(k, v)| (k.clone(), String::from_utf8_lossy(v).into_owned()))
                .collect(),
        })
    }

    /// Total number of columns (fields, counting nested ones).
    pub fn num_columns(&self) -> usize {
        self.fields.iter().map(|f| f.num_columns()).sum()
    }

    /// Index of a top-level field by name.
    pub fn field_index(&self, name: &str) -> Option<usize> {
        self.fields.iter().position(|f| f.name == name)
    }

    /// The largest field id in use (-1 when empty).
    pub fn max_field_id(&self) -> i32 {
        fn max(f: &LanceField) -> i32 {
            f.children.iter().map(max).fold(f.id, i32::max)
        }
        self.fields.iter().map(max).fold(-1, i32::max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logical_types_roundtrip() {
        let types = vec![
            DataType::Int8,
            DataType::UInt64,
            DataType::Float16,
            DataType::Timestamp(TimeUnit::Microsecond, Some("+05:00".into())),
            DataType::Timestamp(TimeUnit::Nanosecond, None),
            DataType::Time32(TimeUnit::Millisecond),
            DataType::Date64,
            DataType::Decimal128(20, 3),
            DataType::FixedSizeBinary(16),
            DataType::FixedSizeList(Arc::new(Field::new("item", DataType::Float32, true)), 128),
        ];
        for t in types {
            let lt = logical_type(&t).unwrap();
            assert_eq!(parse_logical_type(&lt), Some(t.clone()), "{lt}");
        }
        assert!(logical_type(&DataType::Utf8View).is_err());
    }

    #[test]
    fn schema_roundtrip_through_pb() {
        let schema = Schema::new(vec![
            Field::new("a", DataType::Int64, false),
            Field::new(
                "s",
                DataType::Struct(Fields::from(vec![
                    Field::new("x", DataType::Utf8, true),
                    Field::new_list("l", Field::new("item", DataType::Int32, true), true),
                ])),
                true,
            ),
        ]);
        let ls = LanceSchema::from_arrow(&schema).unwrap();
        assert_eq!(ls.num_columns(), 5);
        let pbf = ls.to_pb_fields();
        assert_eq!(
            pbf.iter().map(|f| f.id).collect::<Vec<_>>(),
            vec![0, 1, 2, 3, 4]
        );
        assert_eq!(pbf[3].parent_id, 1);
        let back = LanceSchema::from_pb(&pbf, &HashMap::new()).unwrap();
        assert_eq!(back.to_arrow().unwrap(), schema);
    }
}
