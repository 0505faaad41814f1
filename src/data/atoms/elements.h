// Chemical elements by atomic number (1-118): the symbols extended XYZ files name species by.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace weft {

// The atomic number of an element symbol ("H", "He", ..., "Og"; exact case), 0 if none.
int32_t atomic_number(std::string_view symbol);
// The symbol of atomic number z in [1, 118]; InputError otherwise.
std::string element_symbol(int32_t z);

}  // namespace weft
