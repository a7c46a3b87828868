/* elf.c: the symbol table of an ELF64 file, read from the file itself.
 *
 * The dynamic symbol table in memory is not enough: a default PIE exports
 * neither its globals nor its file-static variables, which are only in
 * .symtab (a section that is never loaded).  So the file is mapped and its
 * section headers are read: .symtab when present, else .dynsym (a stripped
 * file, or one whose .symtab is corrupted, which is said).  In .symtab the local symbols come first, each group after the
 * STT_FILE symbol naming the source file it came from; that is how a
 * file-static symbol is told from its namesakes in other files. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "preload.h"

static int fail(char *why, size_t len, const char *msg)
{
    snprintf(why, len, "%s", msg);
    return -1;
}

/* Section i, when its contents lie inside the file. */
static const Elf64_Shdr *section(const struct pl_elf *e, size_t i)
{
    const Elf64_Shdr *s;

    if (i >= e->shnum)
        return NULL;
    s = &e->sh[i];
    if (s->sh_type != SHT_NOBITS &&
        (s->sh_offset > e->size || s->sh_size > e->size - s->sh_offset))
        return NULL;
    return s;
}

static int use_table(struct pl_elf *e, const Elf64_Shdr *t)
{
    const Elf64_Shdr *str = section(e, t->sh_link);

    if (t->sh_entsize != sizeof(Elf64_Sym) || t->sh_offset % 8 != 0 || !str ||
        str->sh_type != SHT_STRTAB || str->sh_size == 0)
        return -1;
    e->sym = (const Elf64_Sym *)(e->map + t->sh_offset);
    e->nsym = t->sh_size / sizeof(Elf64_Sym);
    e->str = (const char *)(e->map + str->sh_offset);
    e->strsz = str->sh_size;
    e->first_global = t->sh_info < e->nsym ? t->sh_info : e->nsym;
    return 0;
}

/* The symbol table to use: .symtab, else .dynsym.  A .symtab that is
 * there but unusable is not taken for a stripped file: the fallback to
 * .dynsym is kept, with e->symtab_bad saying what is wrong. */
static int pick_table(struct pl_elf *e, char *why, size_t whylen)
{
    const Elf64_Shdr *symtab = NULL, *dynsym = NULL;
    size_t i;

    for (i = 1; i < e->shnum; i++) {
        const Elf64_Shdr *s = section(e, i);

        if (e->sh[i].sh_type == SHT_SYMTAB && !symtab && !e->symtab_bad) {
            if (!s)
                e->symtab_bad = "its contents lie past the end of the file";
            symtab = s;
        } else if (s && s->sh_type == SHT_DYNSYM && !dynsym) {
            dynsym = s;
        }
    }
    if (symtab && use_table(e, symtab) == 0)
        return 0;
    if (symtab)
        e->symtab_bad = "a bad entry size, alignment or string table";
    if (dynsym && use_table(e, dynsym) == 0) {
        e->dynamic_only = 1;
        return 0;
    }
    return fail(why, whylen,
                e->symtab_bad ? "corrupted .symtab and no usable "
                                ".dynsym"
                              : "no symbol table");
}

int pl_elf_parse(struct pl_elf *e, const unsigned char *map, size_t size,
                 char *why, size_t whylen)
{
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)map;

    memset(e, 0, sizeof *e);
    if (size < sizeof(Elf64_Ehdr))
        return fail(why, whylen, "too short for ELF");
    e->map = map;
    e->size = size;
    if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 ||
        eh->e_ident[EI_CLASS] != ELFCLASS64 ||
        eh->e_ident[EI_DATA] != ELFDATA2LSB)
        return fail(why, whylen, "not a little-endian ELF64 file");
    if (eh->e_shoff == 0 || eh->e_shentsize != sizeof(Elf64_Shdr) ||
        eh->e_shoff % 8 != 0 || eh->e_shoff > e->size)
        return fail(why, whylen, "no usable section headers");
    e->sh = (const Elf64_Shdr *)(e->map + eh->e_shoff);
    e->shnum = eh->e_shnum;
    if (e->shnum == 0 && e->size - eh->e_shoff >= sizeof(Elf64_Shdr))
        e->shnum = e->sh[0].sh_size; /* more than SHN_LORESERVE */
    if (e->shnum == 0 ||
        e->shnum > (e->size - eh->e_shoff) / sizeof(Elf64_Shdr))
        return fail(why, whylen, "section headers past the end of the file");
    return pick_table(e, why, whylen);
}

int pl_elf_open(struct pl_elf *e, const char *path, char *why, size_t whylen)
{
    struct stat st;
    void *map;
    int fd;

    memset(e, 0, sizeof *e);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(why, whylen, "cannot open: %s", strerror(errno));
        return -1;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
        st.st_size < (off_t)sizeof(Elf64_Ehdr)) {
        close(fd);
        return fail(why, whylen, "not a regular file, or too short for ELF");
    }
    map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) {
        snprintf(why, whylen, "cannot map: %s", strerror(errno));
        return -1;
    }
    if (pl_elf_parse(e, map, (size_t)st.st_size, why, whylen) != 0) {
        munmap(map, (size_t)st.st_size);
        memset(e, 0, sizeof *e);
        return -1;
    }
    e->mapped = 1;
    return 0;
}

void pl_elf_close(struct pl_elf *e)
{
    if (e->map && e->mapped)
        munmap((void *)e->map, e->size);
    memset(e, 0, sizeof *e);
}

static const char *name_at(const struct pl_elf *e, size_t off)
{
    if (off >= e->strsz || !memchr(e->str + off, '\0', e->strsz - off))
        return NULL;
    return e->str + off;
}

int pl_elf_each(const struct pl_elf *e, pl_sym_fn fn, void *arg)
{
    const char *file = NULL;
    size_t i;
    int rc;

    for (i = 1; i < e->nsym; i++) {
        const Elf64_Sym *s = &e->sym[i];
        int type = ELF64_ST_TYPE(s->st_info);
        const char *name = name_at(e, s->st_name);

        if (i == e->first_global)
            file = NULL;
        if (type == STT_FILE) {
            if (ELF64_ST_BIND(s->st_info) == STB_LOCAL)
                file = name && *name ? name : NULL;
            continue;
        }
        if (!name || !*name || s->st_shndx == SHN_UNDEF ||
            type == STT_SECTION)
            continue;
        rc = fn(arg, s, name,
                ELF64_ST_BIND(s->st_info) == STB_LOCAL ? file : NULL);
        if (rc)
            return rc;
    }
    return 0;
}
