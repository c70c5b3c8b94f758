//! `heat_template_version`: the dates and release names Heat accepts, and which
//! function each version brings (Heat's `heat/engine/hot/template.py`). A template
//! that calls a function its version does not have is refused, as Heat refuses it.

use std::fmt;

/// Every HOT version Heat knows, oldest first, with its release name when it has one.
const VERSIONS: [(&str, Option<&str>); 11] = [
    ("2013-05-23", None),
    ("2014-10-16", None),
    ("2015-04-30", None),
    ("2015-10-15", None),
    ("2016-04-08", None),
    ("2016-10-14", Some("newton")),
    ("2017-02-24", Some("ocata")),
    ("2017-09-01", Some("pike")),
    ("2018-03-02", Some("queens")),
    ("2018-08-31", Some("rocky")),
    ("2021-04-16", Some("wallaby")),
];

/// A `heat_template_version`, ordered by date.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TemplateVersion(usize);

impl TemplateVersion {
    /// 2013-05-23, the first HOT version.
    pub const V2013_05_23: Self = Self(0);
    /// 2015-04-30: `digest`, `repeat`.
    pub const V2015_04_30: Self = Self(2);
    /// 2015-10-15: `str_split`, `list_join` of several lists.
    pub const V2015_10_15: Self = Self(3);
    /// 2016-04-08: `map_merge`.
    pub const V2016_04_08: Self = Self(4);
    /// 2016-10-14 (newton): `conditions`, `if`, `map_replace`, `yaql`.
    pub const NEWTON: Self = Self(5);
    /// 2017-02-24 (ocata): `filter`, `str_replace_strict`, the `modulo` constraint.
    pub const OCATA: Self = Self(6);
    /// 2017-09-01 (pike): `list_concat(_unique)`, `contains`, `make_url`,
    /// `str_replace_vstrict`, `repeat`'s `permutations`.
    pub const PIKE: Self = Self(7);
    /// 2021-04-16 (wallaby): `if` with two arguments (a property left unset when the
    /// condition is false), and inside conditions.
    pub const WALLABY: Self = Self(10);
    /// The newest version Heat knows.
    pub const LATEST: Self = Self(VERSIONS.len() - 1);

    /// The version for a template's spelling: a date or a release name.
    pub fn parse(text: &str) -> Result<Self, String> {
        VERSIONS
            .iter()
            .position(|(date, name)| *date == text || *name == Some(text))
            .map(Self)
            .ok_or_else(|| {
                let mut known: Vec<&str> = VERSIONS.iter().map(|(d, _)| *d).collect();
                known.extend(VERSIONS.iter().filter_map(|(_, n)| *n));
                format!(
                    "The template version is invalid: \"heat_template_version: {text}\". \
                     \"heat_template_version\" should be one of: {}",
                    known.join(", ")
                )
            })
    }

    /// Its date, `2018-08-31`.
    pub fn date(self) -> &'static str {
        VERSIONS[self.0].0
    }

    /// True when the template may have a `conditions` section and `condition` keys.
    pub fn has_conditions(self) -> bool {
        self >= Self::NEWTON
    }
}

impl fmt::Display for TemplateVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.date())
    }
}

/// The first version in which `name` is a function outside the `conditions` section;
/// `None` when Heat has no such function there.
pub fn function_since(name: &str) -> Option<TemplateVersion> {
    Some(match name {
        "get_param" | "get_resource" | "get_attr" | "get_file" | "list_join" | "str_replace"
        | "resource_facade" => TemplateVersion::V2013_05_23,
        "digest" | "repeat" => TemplateVersion::V2015_04_30,
        "str_split" => TemplateVersion::V2015_10_15,
        "map_merge" => TemplateVersion::V2016_04_08,
        "if" | "map_replace" | "yaql" => TemplateVersion::NEWTON,
        "filter" | "str_replace_strict" => TemplateVersion::OCATA,
        "make_url" | "list_concat" | "list_concat_unique" | "str_replace_vstrict" | "contains" => {
            TemplateVersion::PIKE
        }
        _ => return None,
    })
}

/// The first version in which `name` is a function inside the `conditions` section
/// (and a resource's or an output's `condition`, or `if`'s first argument).
pub fn condition_function_since(name: &str) -> Option<TemplateVersion> {
    Some(match name {
        "get_param" | "equals" | "not" | "and" | "or" => TemplateVersion::NEWTON,
        "contains" | "yaql" => TemplateVersion::PIKE,
        "if" => TemplateVersion::WALLABY,
        _ => return None,
    })
}

/// Heat's refusal of a function the declared version does not have, with the version
/// that brings it.
pub fn not_in_version(name: &str, version: TemplateVersion, since: TemplateVersion) -> String {
    format!(
        "The template version is invalid: The function {name} is not supported in this \
         version of HOT (heat_template_version {version}; {name} needs {since} or later)"
    )
}
